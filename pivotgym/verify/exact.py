"""The exact-match verifier: the ablation baseline every domain's functional verifier must at least match."""

from __future__ import annotations

from pivotgym.types import Verdict
from pivotgym.verify.compare import normalize_whitespace
from pivotgym.verify.context import VerifyContext

__all__ = ["ExactMatchVerifier"]


class ExactMatchVerifier:
    """Reward 1 only when the candidate text equals the expert's text up to surrounding/inner whitespace.

    The ablation baseline: every domain's functional verifier should credit at least what this credits.
    """

    name = "exact"
    version = "1"

    def verify(self, context: VerifyContext, candidate: str) -> Verdict:
        expected = normalize_whitespace(context.expert_text)
        got = normalize_whitespace(candidate if isinstance(candidate, str) else "")
        if got == expected:
            return Verdict.ok("exact_match")
        return Verdict.fail("text_differs", expected=expected[:200], got=got[:200])
