"""The judge-a-candidate service that profiling, selection, training and the checker share.

Two things live here so that every caller agrees on them:

* **Where undecided verdicts come from.** A verdict either judges a candidate (reward in [0, 1]) or says the
  verification could not decide (:attr:`~pivotgym.types.Verdict.undecided`, made by
  :meth:`~pivotgym.types.Verdict.undecided_because`). A verifier says so itself (a search out of budget, a
  judge that broke); every other failure is turned into one here and nowhere else: a verifier that raised or
  returned something that is not a ``Verdict`` (:func:`verify_safely`), a verification that timed out or
  whose worker died (:func:`failed_verification`), a sampler that produced no candidate
  (:func:`failed_sample`). An undecided verdict is never a reward: the profiler keeps its reason apart from
  a state's rewards, selection does not count it, training drops the sample from its group, ``pivotgym
  check`` fails the probe and ``pivotgym verify`` exits non-zero.
* **The caches.** :class:`Judge` makes each verifier once and keeps one :class:`VerifyContext` per state, so
  a state's prefix is replayed once, not once per candidate.
* **Batches and cost.** :meth:`Judge.verdicts` hands every candidate of one state to a verifier that judges
  them together (``verify_batch``, e.g. the ``judge`` verifier's one model call), and :attr:`Judge.cost` adds
  up what verdicts say they cost (``components["cost"]``: the model judge's calls, tokens and seconds), which
  profiling and training report beside their own counts.
"""

from __future__ import annotations

import traceback
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from pivotgym.errors import PivotgymError
from pivotgym.types import Verdict
from pivotgym.verify.context import Verifier, VerifyContext

__all__ = [
    "DEFAULT_CONTEXT_CACHE",
    "Judge",
    "add_cost",
    "failed_sample",
    "failed_verification",
    "verify_batch_safely",
    "verify_safely",
]

#: a context cache of this many states per :class:`Judge` by default (each may hold a positioned env)
DEFAULT_CONTEXT_CACHE = 64


def failed_verification(error: str | None) -> Verdict:
    """The verdict of a verification that timed out or whose worker died (``error``: the executor's message;
    its first line is kept)."""
    first = (error or "unknown").strip().splitlines()
    return Verdict.undecided_because("verify_failed: " + (first[0] if first else "unknown"))


def failed_sample(detail: str) -> Verdict:
    """The verdict of a draw the sampler did not produce (an error in place of a completion, or too few)."""
    return Verdict.undecided_because(f"sampling_error: {detail}")


def _verifier_label(verifier: Any) -> str:
    name = getattr(verifier, "name", None)
    kind = type(verifier).__name__
    return f"{name!r} ({kind})" if isinstance(name, str) and name else kind


def verify_safely(verifier: Verifier, context: VerifyContext, candidate: str) -> Verdict:
    """Run a verifier; an exception, or a return value that is not a :class:`~pivotgym.types.Verdict`, becomes
    an undecided verdict (``verifier_error: ...``, naming the verifier and what went wrong)."""
    label = _verifier_label(verifier)
    try:
        verdict = verifier.verify(context, candidate)
    except Exception as exc:
        hint = getattr(exc, "hint", None) if isinstance(exc, PivotgymError) else None
        detail = f"{type(exc).__name__}: {exc}" + (f" (hint: {hint})" if hint else "")
        return Verdict.undecided_because(
            f"verifier_error: verifier {label} raised {detail}", traceback=traceback.format_exc(limit=5)
        )
    if not isinstance(verdict, Verdict):
        shown = repr(verdict)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return Verdict.undecided_because(
            f"verifier_error: verifier {label} returned {type(verdict).__name__} {shown}; "
            "a Verdict was expected (return pivotgym.Verdict.ok(...) or Verdict.fail(...))"
        )
    return verdict


def verify_batch_safely(verifier: Verifier, context: VerifyContext, candidates: Sequence[str]) -> list[Verdict]:
    """Verdicts of every candidate at one state: through the verifier's ``verify_batch`` when it has one (one
    call for them all), else :func:`verify_safely` each. A batch that raises, or does not return one
    ``Verdict`` per candidate, is judged again one candidate at a time, so one bad candidate costs only its own
    verdict."""
    batch = getattr(verifier, "verify_batch", None)
    if callable(batch) and len(candidates) > 1:
        try:
            verdicts = batch(context, list(candidates))
        except Exception:
            verdicts = None
        if isinstance(verdicts, list) and len(verdicts) == len(candidates):
            if all(isinstance(v, Verdict) for v in verdicts):
                return verdicts
    return [verify_safely(verifier, context, c) for c in candidates]


def add_cost(total: dict[str, float], source: Verdict | Mapping[str, Any]) -> None:
    """Add what a verdict says it cost (``components["cost"]``, numbers by name), or a cost mapping, to
    ``total``."""
    cost = source.components.get("cost") if isinstance(source, Verdict) else source
    if isinstance(cost, Mapping):
        for name, value in cost.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                total[name] = round(total.get(name, 0) + value, 6)


class Judge:
    """Judges candidates at states, with the caches every caller wants.

    ``make_verifier(name)`` builds a verifier from its registry name (the registry's ``make_verifier``; this
    layer sits below the registry, so the caller passes it). Verifiers are made once per name; contexts are
    kept per state key, the ``max_contexts`` most recently used (None: all), so a state's prefix is replayed
    once per judge. A judge belongs to one process (the profiler keeps one per executor worker).
    """

    def __init__(
        self, make_verifier: Callable[[str], Verifier], *, max_contexts: int | None = DEFAULT_CONTEXT_CACHE
    ) -> None:
        self._make_verifier = make_verifier
        self.max_contexts = max_contexts
        self._verifiers: dict[str, Verifier] = {}
        self._contexts: OrderedDict[Hashable, VerifyContext] = OrderedDict()
        #: what the verdicts judged so far said they cost, summed by name (:func:`add_cost`)
        self.cost: dict[str, float] = {}

    def verifier(self, name: str) -> Verifier:
        """The verifier registered as ``name``, made on first use."""
        if name not in self._verifiers:
            self._verifiers[name] = self._make_verifier(name)
        return self._verifiers[name]

    def context(self, key: Hashable, make: Callable[[], VerifyContext]) -> VerifyContext:
        """The context of state ``key``, made by ``make()`` on first use (and again after eviction)."""
        context = self._contexts.get(key)
        if context is None:
            context = self._contexts[key] = make()
            if self.max_contexts is not None:
                while len(self._contexts) > self.max_contexts:
                    self._contexts.popitem(last=False)
        else:
            self._contexts.move_to_end(key)
        return context

    def verdict(
        self, verifier: str, key: Hashable, make_context: Callable[[], VerifyContext], candidate: str
    ) -> Verdict:
        """The verdict of ``verifier`` on ``candidate`` at state ``key`` (never raises for the verifier)."""
        return self.verdicts(verifier, key, make_context, [candidate])[0]

    def verdicts(
        self, verifier: str, key: Hashable, make_context: Callable[[], VerifyContext], candidates: Sequence[str]
    ) -> list[Verdict]:
        """The verdicts of ``verifier`` on every candidate at state ``key``, judged together where the verifier
        can (:func:`verify_batch_safely`); their cost is added to :attr:`cost`."""
        verdicts = verify_batch_safely(self.verifier(verifier), self.context(key, make_context), candidates)
        for verdict in verdicts:
            add_cost(self.cost, verdict)
        return verdicts

    def rewards(
        self, verifier: str, key: Hashable, make_context: Callable[[], VerifyContext], candidates: Sequence[str]
    ) -> list[float | None]:
        """The rewards of every candidate at state ``key``, None where the verification was undecided."""
        return [v.reward if v.decided else None for v in self.verdicts(verifier, key, make_context, candidates)]

    def reward(
        self, verifier: str, key: Hashable, make_context: Callable[[], VerifyContext], candidate: str
    ) -> float | None:
        """The reward of ``candidate``, or None when the verification was undecided."""
        verdict = self.verdict(verifier, key, make_context, candidate)
        return verdict.reward if verdict.decided else None
