import pickle

import pytest

from pivotgym.types import ToolCall, Trajectory, Verdict, message
from pivotgym.verify import (
    ExactMatchVerifier,
    VerifyContext,
    arguments_equivalent,
    calls_equivalent,
    coerce_value,
    normalize_string,
    type_matches,
    values_equivalent,
    verify_safely,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "default": 1},
        "metric": {"type": "boolean"},
        "temp": {"type": "number"},
    },
}


@pytest.mark.parametrize(
    "value,type_name,expected",
    [
        ("2", "integer", "2"),
        (2.0, "integer", 2),
        (2, "number", 2),
        ("true", "boolean", "true"),
        (3, "string", 3),
        ("abc", "integer", "abc"),
        (True, "integer", True),
        (float("inf"), "integer", float("inf")),
    ],
)
def test_coerce_value_only_rewrites_integral_floats_for_integers(value, type_name, expected):
    got = coerce_value(value, type_name)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "value,type_name,ok",
    [
        (70, "integer", True),
        (70.0, "integer", True),
        (70.5, "integer", False),
        ("70", "integer", False),
        (True, "integer", False),
        (1, "number", True),
        ("1.5", "number", False),
        ("true", "boolean", False),
        (False, "boolean", True),
        (3, "string", False),
        ([1], "array", True),
        ({}, "object", True),
        ("x", None, True),
    ],
)
def test_type_matches_is_strict_like_bfcl(value, type_name, ok):
    assert type_matches(value, type_name) is ok


def test_values_equivalent_numbers_strings_and_structures():
    assert values_equivalent(2, 2.0)
    assert not values_equivalent(True, 1)
    assert values_equivalent("  New York ", "New York")
    assert values_equivalent("Cafe\u0301", "Caf\u00e9")  # NFC: the same text
    assert not values_equivalent("New York, NY", "new york ny")
    assert not values_equivalent("my_data", "mydata") and not values_equivalent("a/b.txt", "ab.txt")
    assert not values_equivalent("\uff43\uff45\uff4c\uff53\uff49\uff55\uff53", "celsius")  # full-width letters
    assert not values_equivalent("Paris", "paris")
    assert values_equivalent("Paris", "paris", spec={"type": "string", "description": "City, case-insensitive."})
    assert values_equivalent([1, {"a": "X"}], [1.0, {"a": "X"}])
    assert not values_equivalent([1, 2], [2, 1])
    assert not values_equivalent(" ab", "ab", loose_strings=False)
    assert normalize_string("  Hello-World. ") == "Hello-World."


def test_numbers_never_raise_on_huge_or_odd_values():
    huge = 10**400
    assert values_equivalent(huge, huge) and not values_equivalent(huge, huge + 1)
    assert not values_equivalent(huge, 1.5) and not values_equivalent(float("nan"), float("nan"))
    assert values_equivalent(float("inf"), float("inf"))
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert not values_equivalent(deep, deep)


def test_arguments_equivalent_uses_schema_defaults_and_strict_types():
    assert arguments_equivalent({"city": "Paris", "days": 1}, {"city": "Paris"}, schema=SCHEMA).ok
    assert arguments_equivalent({"city": "Paris"}, {"city": "Paris", "days": 1.0}, schema=SCHEMA).ok
    assert arguments_equivalent({"city": "Paris", "temp": 20}, {"city": "Paris", "temp": 20.0}, schema=SCHEMA).ok
    assert arguments_equivalent({"city": "Paris", "days": "1"}, {"city": "Paris"}, schema=SCHEMA).reason == "wrong_type"
    wrong = arguments_equivalent({"city": "Paris", "days": 2}, {"city": "Paris", "days": 3}, schema=SCHEMA)
    assert not wrong.ok and wrong.reason == "argument_value"
    off_default = arguments_equivalent({"city": "Paris", "days": 2}, {"city": "Paris"}, schema=SCHEMA)
    assert off_default.reason == "unexpected_argument"
    missing = arguments_equivalent({"city": "Paris"}, {"city": "Paris", "days": 2}, schema=SCHEMA)
    assert missing.reason == "missing_argument"
    extra = arguments_equivalent({"city": "Paris", "metric": True}, {"city": "Paris"}, schema=SCHEMA)
    assert not extra.ok and extra.reason == "unexpected_argument"
    unknown = arguments_equivalent({"city": "Paris", "x": 1}, {"city": "Paris"}, schema=SCHEMA)
    assert unknown.reason == "unexpected_argument"
    missing = arguments_equivalent({}, {"city": "Paris"}, schema=SCHEMA)
    assert missing.reason == "missing_argument"


def test_calls_equivalent_parallel_calls_in_any_order():
    a = [ToolCall("w", {"city": "Paris"}), ToolCall("w", {"city": "Rome"})]
    b = [ToolCall("w", {"city": "Rome"}), ToolCall("w", {"city": "Paris"})]
    assert calls_equivalent(a, b).ok
    assert not calls_equivalent(a, b, order_free=False).ok
    assert calls_equivalent(a, a[:1]).reason == "call_count"
    assert calls_equivalent([ToolCall("x", {})], [ToolCall("w", {})]).reason == "function_name"
    near = calls_equivalent([ToolCall("w", {"city": "Paris"}), ToolCall("w", {"city": "Oslo"})], b)
    assert not near.ok and near.reason == "argument_value"


def test_from_turn_builds_a_context_for_any_turn():
    tools = [{"type": "function", "function": {"name": "w", "parameters": SCHEMA}}]
    ctx = VerifyContext.from_turn(
        "x/y-v0", [message("user", "weather in Paris?")], [{"name": "w", "arguments": {"city": "Paris"}}], tools=tools
    )
    assert ctx.turn.task_id.startswith("adhoc:") and ctx.tools == tools and ctx.turn.turn == 0
    assert ctx.turn.expert["tool_calls"][0]["function"]["name"] == "w"
    assert VerifyContext.from_turn("x/y-v0", [], "hello").turn.expert == {"role": "assistant", "content": "hello"}
    assert pickle.loads(pickle.dumps(ctx)).tools == tools
    with pytest.raises(ValueError, match="name"):
        VerifyContext.from_turn("x/y-v0", [], [{"arguments": {}}])


def test_from_trajectory_carries_the_trajectory_tools_and_memo_is_per_context():
    traj = Trajectory(
        "t",
        "x/y-v0",
        "k",
        [message("user", "q"), message("assistant", "a")],
        metadata={"tools": [{"type": "function", "function": {"name": "w"}}]},
    )
    ctx = VerifyContext.from_trajectory(traj, 0)
    assert ctx.tools == traj.metadata["tools"] and ctx.turn.expert["content"] == "a"
    calls = []
    assert ctx.memo("k", lambda: calls.append(1) or 41) == 41 and ctx.memo("k", lambda: 0) == 41 and calls == [1]
    assert pickle.loads(pickle.dumps(ctx))._memo == {}
    assert VerifyContext.from_trajectory(Trajectory("t", "x/y-v0", "k", traj.messages), 0).tools is None


def _arith_turn(registry, n=0):
    env = registry.make("arith/chain-v0")
    traj = next(env.expert_trajectories("train", limit=1))
    return traj.turn(n)


def test_exact_match_verifier_is_whitespace_tolerant_only(arith_registry):
    turn = _arith_turn(arith_registry)
    ctx = VerifyContext(turn)
    expected = ctx.expert_text
    v = ExactMatchVerifier()
    assert v.verify(ctx, f"  {expected}\n").reward == 1.0
    assert v.verify(ctx, f"{expected} + 0").reward == 0.0


def test_functional_verifier_credits_equivalent_expressions_from_the_turn_state(arith_registry):
    turn = _arith_turn(arith_registry, n=1)
    verifier = arith_registry.make_verifier("arith/value")
    ctx = VerifyContext(turn)
    value = int(ctx.expert_text)
    assert verifier.verify(ctx, f"({value} - 1) + 1").equivalent
    assert not verifier.verify(ctx, str(value + 1)).equivalent
    # the context is picklable (for process pools) and rebuilds its env on the other side
    clone = pickle.loads(pickle.dumps(ctx))
    assert verifier.verify(clone, str(value)).reward == 1.0


class _Broken:
    name, version = "broken", "0"

    def verify(self, context, candidate):
        raise ZeroDivisionError("oops")


class _WrongType:
    name, version = "wrong", "0"

    def verify(self, context, candidate):
        return 1.0


def test_verify_safely_turns_errors_into_failing_verdicts():
    ctx = VerifyContext(Trajectory("t", "x/y-v0", "k", [message("user", "q"), message("assistant", "a")]).turn(0))
    v = verify_safely(_Broken(), ctx, "x")
    assert isinstance(v, Verdict) and v.reward == 0 and "ZeroDivisionError" in v.reason
    assert "returned float" in verify_safely(_WrongType(), ctx, "x").reason
