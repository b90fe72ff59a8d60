"""The reasoning envs' functional verifier: the generator's own scorer decides, not the string."""

from __future__ import annotations

from pivotgym import AnswerVerifier

__all__ = ["ReasoningVerifier"]


class ReasoningVerifier(AnswerVerifier):
    """Functional verifier of the reasoning envs: credits any reply whose read answer the generator's own
    scorer gives full marks (``-4`` and ``5 - 9 = -4``, ``[1, 7]`` and ``['1', '7']``)."""

    name = "reasoning/answer"
    version = "1"
