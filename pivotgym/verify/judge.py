"""The judge-a-candidate service that profiling, selection, training and the checker share.

Two things live here so that every caller agrees on them:

* **The undecided rule.** A verdict either judges a candidate (reward in [0, 1]) or says the verification
  could not decide: the verifier raised or returned something that is not a :class:`~pivotgym.types.Verdict`
  (``verifier_error``, from :func:`verify_safely`), the verification timed out or its worker died
  (``verify_failed``, from the executor), the sampler produced no candidate (``sampling_error``), or the
  verifier itself said it could not judge: ``components["verification_failed"]`` (True or a short reason) or
  ``components["budget_exhausted"]`` (a search out of budget). :func:`undecided_reason` applies it to a
  verdict, :func:`is_undecided_reason` to a reason stored in a profile row. An undecided verdict is never a
  reward: the profiler leaves it out of a state's statistics, selection does not count it, training drops the
  sample from its group, ``pivotgym check`` fails the probe and ``pivotgym verify`` exits non-zero.
* **The caches.** :class:`Judge` makes each verifier once and keeps one :class:`VerifyContext` per state, so
  a state's prefix is replayed once, not once per candidate.
"""

from __future__ import annotations

import traceback
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

from pivotgym.errors import PivotgymError
from pivotgym.types import Verdict
from pivotgym.verify.context import Verifier, VerifyContext

__all__ = [
    "BUDGET_EXHAUSTED",
    "DEFAULT_CONTEXT_CACHE",
    "UNDECIDED_PREFIXES",
    "VERIFICATION_FAILED",
    "Judge",
    "is_undecided",
    "is_undecided_reason",
    "undecided_reason",
    "verify_safely",
]

#: the Verdict component a verifier sets (to True or a short reason) when it could not judge a candidate -
#: budget exhausted, solver timed out, internal error - as opposed to judging it wrong
VERIFICATION_FAILED = "verification_failed"
#: the component a search-based verifier sets when it ran out of budget (also undecided)
BUDGET_EXHAUSTED = "budget_exhausted"
#: reason prefixes of verdicts that are not judgements: a verifier that raised or returned no Verdict
#: (``verifier_error``), a verification that timed out or crashed (``verify_failed``), a verifier's own
#: ``verification_failed`` / ``budget_exhausted``, a sample that never came (``sampling_error``)
UNDECIDED_PREFIXES = ("verifier_error", "verify_failed", VERIFICATION_FAILED, BUDGET_EXHAUSTED, "sampling_error")
#: a context cache of this many states per :class:`Judge` by default (each may hold a positioned env)
DEFAULT_CONTEXT_CACHE = 64
#: undecided reasons are cut to this length (they are stored in every profile row)
MAX_REASON = 300


def is_undecided_reason(reason: str) -> bool:
    """Whether a stored reason (a profile row's ``reasons`` or ``failed_reasons``) marks an undecided sample."""
    return str(reason).startswith(UNDECIDED_PREFIXES)


def undecided_reason(verdict: Verdict) -> str | None:
    """Why ``verdict`` is not a judgement (see the module docstring), or None when it is one.

    A verifier's own flag comes first: ``verification_failed: <its reason>`` (the flag's text when it is a
    string, else the verdict's reason); otherwise a reason with an undecided prefix is returned as it is."""
    components = verdict.components or {}
    for flag in (VERIFICATION_FAILED, BUDGET_EXHAUSTED):
        value = components.get(flag)
        if value:
            detail = value if isinstance(value, str) else verdict.reason
            return f"{VERIFICATION_FAILED}: {detail}"[:MAX_REASON]
    if is_undecided_reason(verdict.reason):
        return verdict.reason[:MAX_REASON]
    return None


def is_undecided(verdict: Verdict) -> bool:
    """Whether ``verdict`` says the verification could not decide (:func:`undecided_reason` is not None)."""
    return undecided_reason(verdict) is not None


def _verifier_label(verifier: Any) -> str:
    name = getattr(verifier, "name", None)
    kind = type(verifier).__name__
    return f"{name!r} ({kind})" if isinstance(name, str) and name else kind


def verify_safely(verifier: Verifier, context: VerifyContext, candidate: str) -> Verdict:
    """Run a verifier; an exception, or a return value that is not a :class:`~pivotgym.types.Verdict`, becomes
    an undecided verdict (reward 0, reason ``verifier_error: ...`` naming the verifier and what went wrong)."""
    label = _verifier_label(verifier)
    try:
        verdict = verifier.verify(context, candidate)
    except Exception as exc:
        hint = getattr(exc, "hint", None) if isinstance(exc, PivotgymError) else None
        detail = f"{type(exc).__name__}: {exc}" + (f" (hint: {hint})" if hint else "")
        return Verdict.fail(
            f"verifier_error: verifier {label} raised {detail}", traceback=traceback.format_exc(limit=5)
        )
    if not isinstance(verdict, Verdict):
        shown = repr(verdict)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return Verdict.fail(
            f"verifier_error: verifier {label} returned {type(verdict).__name__} {shown}; "
            "a Verdict was expected (return pivotgym.Verdict.ok(...) or Verdict.fail(...))"
        )
    return verdict


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
        return verify_safely(self.verifier(verifier), self.context(key, make_context), candidate)

    def reward(
        self, verifier: str, key: Hashable, make_context: Callable[[], VerifyContext], candidate: str
    ) -> float | None:
        """The reward of ``candidate``, or None when the verification was undecided."""
        verdict = self.verdict(verifier, key, make_context, candidate)
        return None if is_undecided(verdict) else verdict.reward
