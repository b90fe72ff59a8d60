"""Verifiers composed from others: a fallback where one is undecided, and one verifier per kind of action.

A composed verifier is named by its parts joined with ``|`` and tried in order; the first part that applies
to the turn and decides gives the verdict. A part may be limited to one kind of action with a prefix:
``message:`` (the expert's action is a message, no tool call) or ``call:`` (it calls tools). So

* ``functional|judge`` - the env's rule verifier, and the ``judge`` where the rule cannot decide;
* ``message:judge|functional`` - the judge for message turns, the rule verifier for tool calls (and for a
  message turn whose judge answer was undecided);
* ``judge`` alone needs no composition.

Anywhere a verifier name is taken (``pivotgym verify --verifier``, ``profile``, ``train``, the experiment's
``verifier``), these names work: :meth:`pivotgym.registry.Registry.verifier_name_for` resolves ``functional``
and ``exact`` inside them to the env's own verifiers and :meth:`~pivotgym.registry.Registry.make_verifier`
builds the composition. Each verdict says which part gave it (``components["verifier"]``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pivotgym.errors import ConfigError
from pivotgym.types import Verdict
from pivotgym.verify.context import Verifier, VerifyContext

__all__ = ["ACTION_KINDS", "ComposedVerifier", "action_kind", "composition", "join_composition"]

#: the kinds of action a part of a composition may be limited to
ACTION_KINDS = ("message", "call")


def action_kind(context: VerifyContext) -> str:
    """``"call"`` when the expert's action at ``context`` calls a tool, else ``"message"``."""
    return "call" if context.expert.get("tool_calls") else "message"


def composition(name: str) -> list[tuple[str | None, str]] | None:
    """The parts of a composed verifier name as ``(kind or None, verifier name)``, or None for a plain name.
    A kind prefix that is not one of :data:`ACTION_KINDS`, or an empty part, is a :class:`ConfigError`."""
    if "|" not in name and not any(name.startswith(f"{kind}:") for kind in ACTION_KINDS):
        return None
    parts: list[tuple[str | None, str]] = []
    for raw in name.split("|"):
        part = raw.strip()
        kind: str | None = None
        if ":" in part:
            kind, part = (s.strip() for s in part.split(":", 1))
            if kind not in ACTION_KINDS:
                raise ConfigError(
                    f"verifier {name!r}: {kind!r} is no kind of action",
                    hint=f"prefix a part with one of {', '.join(k + ':' for k in ACTION_KINDS)} or none",
                )
        if not part:
            raise ConfigError(f"verifier {name!r} has an empty part", hint="write e.g. functional|judge")
        parts.append((kind, part))
    return parts


def join_composition(parts: Sequence[tuple[str | None, str]]) -> str:
    """The name of a composition of ``parts`` (the inverse of :func:`composition`)."""
    return "|".join(f"{kind}:{name}" if kind else name for kind, name in parts)


class ComposedVerifier:
    """Tries its parts in order (see the module docstring); built by the registry from a composed name."""

    def __init__(self, parts: Sequence[tuple[str | None, Verifier]]) -> None:
        if not parts:
            raise ConfigError("a composed verifier needs at least one part")
        self.parts = list(parts)
        self.name = join_composition([(kind, verifier.name) for kind, verifier in self.parts])
        self.version = "|".join(str(verifier.version) for _, verifier in self.parts)

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        return self.verify_batch(context, [candidate])[0]

    def verify_batch(self, context: VerifyContext, candidates: Sequence[str]) -> list[Verdict]:
        """Every candidate's verdict: each part judges, in one batch, the candidates no earlier part decided."""
        from pivotgym.verify.judge import verify_batch_safely

        kind = action_kind(context)
        out: list[Verdict | None] = [None] * len(candidates)
        last: list[Verdict | None] = [None] * len(candidates)
        for part_kind, verifier in self.parts:
            if part_kind is not None and part_kind != kind:
                continue
            todo = [i for i, v in enumerate(out) if v is None]
            if not todo:
                break
            for i, verdict in zip(todo, verify_batch_safely(verifier, context, [candidates[i] for i in todo])):
                verdict.components.setdefault("verifier", verifier.name)
                last[i] = verdict
                if verdict.decided:
                    out[i] = verdict
        return [
            v or last[i] or Verdict.undecided_because(f"no_verifier: no part of {self.name!r} judges {kind} turns")
            for i, v in enumerate(out)
        ]


def make_composed(name: str, make: Callable[[str], Verifier]) -> ComposedVerifier:
    """The composition ``name`` with each part made by ``make`` (the registry's ``make_verifier``)."""
    parts = composition(name)
    if parts is None:
        raise ConfigError(f"{name!r} is not a composed verifier name", hint="join verifier names with |")
    return ComposedVerifier([(kind, make(part)) for kind, part in parts])
