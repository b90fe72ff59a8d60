"""Verifiers: the protocol, the context they judge in, exact match, comparison helpers and the judge service.

* :mod:`pivotgym.verify.context` - :class:`Verifier` (the protocol), :class:`VerifyContext` (a turn, its env
  state on demand, ad-hoc turns from :meth:`VerifyContext.from_turn`);
* :mod:`pivotgym.verify.exact` - :class:`ExactMatchVerifier`, the ablation baseline;
* :mod:`pivotgym.verify.compare` - domain-free JSON-schema comparison of tool-call arguments;
* :mod:`pivotgym.verify.judge` - :func:`verify_safely` and the other makers of *undecided* verdicts
  (:attr:`pivotgym.types.Verdict.undecided`), and :class:`Judge`, the verifier/context cache that profiling,
  selection, training and the checker share;
* :mod:`pivotgym.verify.llm_judge` - :class:`JudgeVerifier` (``judge``): a model asked, through any sampler,
  whether the candidate achieves what the expert's action did, hardened against the text it judges;
* :mod:`pivotgym.verify.compose` - :class:`ComposedVerifier`: ``functional|judge`` (the judge where the rule is
  undecided), ``message:judge|functional`` (the judge for message turns).

Everything is importable from ``pivotgym.verify`` directly.
"""

from pivotgym.verify.compare import (
    MAX_VALUE_DEPTH,
    CallMatch,
    CallReason,
    arguments_equivalent,
    calls_equivalent,
    coerce_value,
    folds_case,
    is_case_insensitive,
    normalize_string,
    normalize_whitespace,
    numbers_equal,
    param_default,
    perfect_matching,
    string_kind,
    type_matches,
    value_problem,
    values_equivalent,
)
from pivotgym.verify.compose import ACTION_KINDS, ComposedVerifier, action_kind
from pivotgym.verify.context import (
    ADHOC_PREFIX,
    Verifier,
    VerifyContext,
    expert_message,
    set_env_maker,
    trajectory_tools,
)
from pivotgym.verify.exact import ExactMatchVerifier
from pivotgym.verify.judge import (
    DEFAULT_CONTEXT_CACHE,
    Judge,
    add_cost,
    failed_sample,
    failed_verification,
    verify_batch_safely,
    verify_safely,
)
from pivotgym.verify.llm_judge import JudgeTemplate, JudgeVerifier

__all__ = [
    "ACTION_KINDS",
    "ComposedVerifier",
    "JudgeTemplate",
    "JudgeVerifier",
    "action_kind",
    "add_cost",
    "verify_batch_safely",
    "ADHOC_PREFIX",
    "DEFAULT_CONTEXT_CACHE",
    "MAX_VALUE_DEPTH",
    "CallMatch",
    "CallReason",
    "ExactMatchVerifier",
    "Judge",
    "Verifier",
    "VerifyContext",
    "arguments_equivalent",
    "calls_equivalent",
    "coerce_value",
    "expert_message",
    "failed_sample",
    "folds_case",
    "failed_verification",
    "is_case_insensitive",
    "normalize_string",
    "normalize_whitespace",
    "numbers_equal",
    "param_default",
    "perfect_matching",
    "set_env_maker",
    "string_kind",
    "trajectory_tools",
    "type_matches",
    "value_problem",
    "values_equivalent",
    "verify_safely",
]
