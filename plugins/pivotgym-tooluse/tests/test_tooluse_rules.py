"""One test per rule by which the verifier departs from BFCL's checker (the README's table, R1-R11), and the
public API for any turn: ``VerifyContext.from_turn`` and ``pivotgym verify``."""

from __future__ import annotations

import json

import pytest
from tooluse_helpers import context, expert, multi_env, single_env

from pivotgym.cli import main
from pivotgym.types import ToolCall
from pivotgym.verify import VerifyContext
from pivotgym_tooluse.matching import match_call
from pivotgym_tooluse.verifier import ToolCallVerifier, reason_code

V = ToolCallVerifier()
SCHEMA = {
    "type": "object",
    "required": ["city"],
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"type": "integer", "default": 1},
        "scale": {"type": "number"},
        "detailed": {"type": "boolean", "default": False},
        "sep": {"type": "string", "default": ""},
        "station": {"type": "string", "description": "Station code, case-insensitive."},
        "path": {"type": "string"},
    },
}
TOOLS = [
    {"type": "function", "function": {"name": "weather", "description": "Weather.", "parameters": SCHEMA}},
    {
        "type": "function",
        "function": {
            "name": "news",
            "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]},
        },
    },
]


def tc(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}</tool_call>"


def judge(expert_calls, candidate, env_id="tooluse/bfcl-simple-v0"):
    ctx = VerifyContext.from_turn(
        env_id, [{"role": "user", "content": "Weather?"}], expert_calls, tools=TOOLS, env_factory=single_env
    )
    verdict = V.verify(ctx, candidate)
    return verdict.reward, reason_code(verdict)


def W(**args):
    return [ToolCall("weather", {"city": "Paris", **args})]


# ------------------------------------------------------------------------- R1-R11 (the README's table)
def test_rule_R1_strings_keep_inner_punctuation_and_ignore_surrounding_whitespace():
    assert judge(W(), tc("weather", city="  Paris ")) == (1.0, "equivalent:structural")
    assert judge(W(), tc("weather", city="Pa\u0072is"))[0] == 1.0
    assert judge(W(path="my_data.csv"), tc("weather", city="Paris", path="mydata.csv"))[1] == "argument_value"
    assert judge(W(path="a/b.txt"), tc("weather", city="Paris", path="ab.txt"))[1] == "argument_value"
    assert judge(W(sep=" "), tc("weather", city="Paris"))[1] == "missing_argument"  # " " is not the default ""
    assert judge(W(city="Cafe\u0301"), tc("weather", city="Caf\u00e9"))[0] == 1.0  # NFC
    # the BFCL-answers layer follows the same string rule
    schema = {"properties": {"city": {"type": "string"}}}
    assert not match_call(ToolCall("w", {"city": "New York, NY"}), "w", {"city": ["new york ny"]}, schema).ok
    assert match_call(ToolCall("w", {"city": " New York "}), "w", {"city": ["New York"]}, schema).ok


# R2 (changed in version 3: case used to be kept unless the schema said "case-insensitive"; BFCL folds it always):
# case is folded for free text only, decided by the schema and by the parameter's name and description.
def _judge_one(name, spec, expert_value, candidate_value):
    tools = [{"name": "f", "parameters": {"type": "dict", "properties": {name: spec}, "required": [name]}}]
    ctx = VerifyContext.from_turn(
        "tooluse/bfcl-simple-v0", [], [ToolCall("f", {name: expert_value})], tools=tools, env_factory=single_env
    )
    verdict = V.verify(ctx, tc("f", **{name: candidate_value}))
    return verdict.reward, reason_code(verdict)


def test_rule_R2_case_folded_for_free_text():
    assert judge(W(), tc("weather", city="paris")) == (1.0, "equivalent:structural")
    assert _judge_one("genre", {"type": "string", "description": "Music genre"}, "Rock", "ROCK")[0] == 1.0
    assert _judge_one("cities", {"type": "array", "items": {"type": "string"}}, ["Paris"], ["paris"])[0] == 1.0
    # the BFCL-answers layer follows the same rule
    schema = {"properties": {"city": {"type": "string"}}}
    assert match_call(ToolCall("w", {"city": "los angeles"}), "w", {"city": ["Los Angeles"]}, schema).ok


CASE_KEPT = [
    ("enum", "unit", {"type": "string", "enum": ["Celsius", "Fahrenheit"]}, "Celsius"),
    ("id", "user_id", {"type": "string"}, "Ab12"),
    ("id by description", "owner", {"type": "string", "description": "The account's unique ID."}, "Ab12"),
    ("path", "file_name", {"type": "string"}, "Report.PDF"),
    ("path by description", "target", {"type": "string", "description": "Directory to open"}, "Docs"),
    ("url", "url", {"type": "string"}, "https://x.org/A"),
    ("email", "email", {"type": "string"}, "Ann@x.org"),
    ("code", "expression", {"type": "string"}, "X**2"),
    ("query", "query", {"type": "string"}, "SELECT A"),
    ("format", "when", {"type": "string", "format": "date-time"}, "2024-01-01T00:00Z"),
    ("pattern", "ref", {"type": "string", "pattern": "^[A-Z]+$"}, "ABC"),
    ("explicitly case-sensitive", "city", {"type": "string", "x-case-sensitive": True}, "Paris"),
    ("case-sensitive by description", "title", {"type": "string", "description": "Title (case-sensitive)"}, "Dune"),
]


@pytest.mark.parametrize("kind,name,spec,value", CASE_KEPT, ids=[c[0] for c in CASE_KEPT])
def test_rule_R2_case_kept_where_it_may_matter(kind, name, spec, value):
    assert _judge_one(name, spec, value, value)[0] == 1.0
    assert _judge_one(name, spec, value, value.swapcase()) == (0.0, "argument_value")
    answer = match_call(ToolCall("w", {name: value.swapcase()}), "w", {name: [value]}, {"properties": {name: spec}})
    assert not answer.ok


def test_rule_R2_explicit_case_insensitive_marks_override():
    assert judge(W(station="LFPG"), tc("weather", city="Paris", station="lfpg"))[0] == 1.0  # "code, case-insensitive"
    flagged = {"properties": {"code": {"type": "string", "x-case-insensitive": True}}}
    assert match_call(ToolCall("w", {"code": "abc"}), "w", {"code": ["ABC"]}, flagged).ok
    enum = {"type": "string", "enum": ["ON", "OFF"], "x-case-insensitive": True}
    assert _judge_one("mode", enum, "ON", "on")[0] == 1.0


def test_rule_R2_multi_turn_file_names_keep_case():
    calls = [ToolCall("cd", {"folder": "Docs"})]
    ctx = VerifyContext.from_turn("tooluse/bfcl-multi-turn-v0", [], calls, env_factory=multi_env)
    assert V.verify(ctx, tc("cd", folder="docs")).reward == 0.0


def test_rule_R3_full_width_text_is_not_an_enum_member():
    wide = "\uff46\uff41\uff48\uff52\uff45\uff4e\uff48\uff45\uff49\uff54"  # "fahrenheit" in full-width letters
    assert judge(W(unit="fahrenheit"), tc("weather", city="Paris", unit=wide))[1] == "argument_value"
    schema = {"properties": {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}
    assert not match_call(ToolCall("w", {"unit": wide}), "w", {"unit": ["fahrenheit"]}, schema).ok


def test_rule_R4_integral_floats_are_integers_but_fractions_are_wrong_types():
    assert judge(W(days=3), tc("weather", city="Paris", days=3.0))[0] == 1.0
    assert judge(W(days=3), tc("weather", city="Paris", days=3.5))[1] == "wrong_type"
    assert match_call(ToolCall("w", {"n": 2.0}), "w", {"n": [2]}, {"properties": {"n": {"type": "integer"}}}).ok


def test_rule_R5_numbers_within_relative_tolerance_only():
    assert judge(W(scale=0.3), tc("weather", city="Paris", scale=0.1 + 0.2))[0] == 1.0
    assert judge(W(scale=1.6e-19), tc("weather", city="Paris", scale=-1.6e-19))[1] == "argument_value"
    assert judge(W(scale=1e-300), tc("weather", city="Paris", scale=0))[1] == "argument_value"


def test_rule_R6_explicit_default_when_bfcl_only_allows_omission():
    schema = {"properties": {"city": {"type": "string"}, "unit": {"type": "string", "default": "celsius"}}}
    assert match_call(
        ToolCall("w", {"city": "Paris", "unit": "celsius"}), "w", {"city": ["Paris"], "unit": [""]}, schema
    ).ok
    assert not match_call(
        ToolCall("w", {"city": "Paris", "unit": "kelvin"}), "w", {"city": ["Paris"], "unit": [""]}, schema
    ).ok
    ctx = context(
        lambda: single_env("tooluse/bfcl-multiple-v0"),
        expert(single_env("tooluse/bfcl-multiple-v0"), "multiple_0").turn(0),
    )
    assert V.verify(ctx, tc("triangle_properties.get", side1=5, side2=4, side3=3, get_area=True)).reward == 1.0


def test_rule_R7_omitted_parameter_whose_default_is_acceptable():
    schema = {"properties": {"city": {"type": "string"}, "unit": {"type": "string", "default": "celsius"}}}
    assert match_call(ToolCall("w", {"city": "Paris"}), "w", {"city": ["Paris"], "unit": ["celsius"]}, schema).ok
    assert not match_call(ToolCall("w", {"city": "Paris"}), "w", {"city": ["Paris"], "unit": ["kelvin"]}, schema).ok


def test_rule_R8_extra_argument_at_its_schema_default():
    schema = {"properties": {"city": {"type": "string"}, "unit": {"type": "string", "default": "celsius"}}}
    assert match_call(ToolCall("w", {"city": "Paris", "unit": "celsius"}), "w", {"city": ["Paris"]}, schema).ok
    extra = match_call(ToolCall("w", {"city": "Paris", "unit": "kelvin"}), "w", {"city": ["Paris"]}, schema)
    assert not extra.ok and extra.reason == "unexpected_argument"


def test_rule_R9_an_empty_answer_list_means_the_empty_list():
    schema = {"properties": {"items": {"type": "array"}}, "required": ["items"]}
    assert match_call(ToolCall("w", {"items": []}), "w", {"items": []}, schema).ok
    assert not match_call(ToolCall("w", {"items": [1]}), "w", {"items": []}, schema).ok


DESCRIBED_DEFAULTS = [
    ("Default is 'cm'", {"type": "string"}, "cm"),
    ("Length unit, defaults to 10.", {"type": "integer"}, 10),
    ("Whether to round. Default: true", {"type": "boolean"}, True),
    ('The default value is "metric".', {"type": "string"}, "metric"),
    ("Ratio (default=0.5)", {"type": "number"}, 0.5),
    ("Year; defaults to 2020", {"type": "string"}, "2020"),
]


@pytest.mark.parametrize("description,spec,default", DESCRIBED_DEFAULTS, ids=[d[0] for d in DESCRIBED_DEFAULTS])
def test_rule_R12_defaults_stated_only_in_the_description(description, spec, default):
    spec = {**spec, "description": description}
    tools = [{"name": "f", "parameters": {"type": "dict", "properties": {"a": {"type": "integer"}, "p": spec}}}]

    def verdict(expert_args, candidate_args):
        ctx = VerifyContext.from_turn(
            "tooluse/bfcl-simple-v0", [], [ToolCall("f", expert_args)], tools=tools, env_factory=single_env
        )
        return V.verify(ctx, tc("f", **candidate_args)).reward

    assert verdict({"a": 1, "p": default}, {"a": 1}) == 1.0  # left out at its stated default
    assert verdict({"a": 1}, {"a": 1, "p": default}) == 1.0  # passed explicitly at its stated default
    other = {str: "zz", int: 99, bool: not default, float: 0.25}[type(default)]
    assert verdict({"a": 1, "p": other}, {"a": 1}) == 0.0
    assert match_call(ToolCall("f", {"a": 1}), "f", {"a": [1], "p": [default]}, tools[0]["parameters"]).ok


def test_rule_R12_schema_defaults_are_coerced_and_unclear_descriptions_give_none():
    from pivotgym.verify.compare import description_default, param_default

    assert param_default({"type": "boolean", "default": "false"}) == (True, False)
    assert param_default({"type": "integer", "default": "10"}) == (True, 10)
    assert param_default({"type": "integer", "default": 2.0}) == (True, 2)
    assert param_default({"type": "string", "default": None}) == (True, None)
    assert description_default({"type": "string", "description": "Default is 'a' for X, default is 'b' for Y"}) == (
        False,
        None,
    )
    assert description_default({"type": "string", "description": "Date, default is 2024-01-01"}) == (False, None)
    assert description_default({"type": "integer", "description": "defaults to 'many'"}) == (False, None)
    tools = [
        {"name": "f", "parameters": {"type": "dict", "properties": {"on": {"type": "boolean", "default": "false"}}}}
    ]
    ctx = VerifyContext.from_turn("tooluse/bfcl-simple-v0", [], [ToolCall("f", {"on": False})], tools=tools)
    assert V.verify(ctx, tc("f")).reward == 1.0


def test_rule_R12_description_regexes_run_in_linear_time():
    import time

    from pivotgym.verify.compare import description_default, string_kind

    for hostile in ("default " * 20000, "default:" + " " * 100000 + "x", "defaults to '" + "a" * 100000, "9" * 100000):
        start = time.perf_counter()
        description_default({"type": "string", "description": "default is " + hostile})
        string_kind("x", {"type": "string", "description": hostile})
        assert time.perf_counter() - start < 0.5


def test_rule_R13_explicit_null_for_a_null_default_on_every_path():
    schema = {"properties": {"city": {"type": "string"}, "zip": {"type": "string", "default": None}}}
    answers = {"city": ["Paris"], "zip": ["", "75001"]}
    assert match_call(ToolCall("w", {"city": "Paris", "zip": None}), "w", answers, schema).ok
    assert match_call(ToolCall("w", {"city": "Paris", "zip": None}), "w", {"city": ["Paris"]}, schema).ok
    described = {"properties": {"city": {"type": "string"}, "zip": {"type": "string", "description": "Default: None"}}}
    assert match_call(ToolCall("w", {"city": "Paris", "zip": None}), "w", answers, described).ok
    assert not match_call(
        ToolCall("w", {"city": "Paris", "zip": None}), "w", {"city": ["Paris"], "zip": ["75001"]}, schema
    ).ok
    tools = [{"name": "w", "parameters": {"type": "dict", **described}}]
    ctx = VerifyContext.from_turn("tooluse/bfcl-simple-v0", [], [ToolCall("w", {"city": "Paris"})], tools=tools)
    assert V.verify(ctx, tc("w", city="Paris", zip=None)).reward == 1.0


def test_rule_R14_synonyms_are_not_decidable_from_the_experts_call():
    verdict = V.verify(
        VerifyContext.from_turn("tooluse/bfcl-simple-v0", [], W(city="Los Angeles"), tools=TOOLS),
        tc("weather", city="LA"),
    )
    assert verdict.reward == 0.0 and reason_code(verdict) == "text_not_decidable"
    assert "not decidable from the expert's call" in verdict.reason
    # decidable differences keep their codes: an enum member, an identifier, case where the schema says it matters
    assert judge(W(unit="celsius"), tc("weather", city="Paris", unit="fahrenheit"))[1] == "argument_value"
    assert judge(W(path="a.txt"), tc("weather", city="Paris", path="b.txt"))[1] == "argument_value"


CREDITED = [
    (
        "argument order",
        W(days=2),
        '<tool_call>{"name": "weather", "arguments": {"days": 2, "city": "Paris"}}</tool_call>',
    ),
    ("int for float", W(scale=2.0), tc("weather", city="Paris", scale=2)),
    ("explicit default", W(), tc("weather", city="Paris", unit="celsius", detailed=False)),
    ("omitted default", W(days=1, unit="celsius"), tc("weather", city="Paris")),
    (
        "numeric form",
        W(days=20),
        '<tool_call>{"name": "weather", "arguments": {"city": "Paris", "days": 2e1}}</tool_call>',
    ),
    ("python syntax", W(days=2), "weather(city='Paris', days=2)"),
    (
        "parallel order",
        [ToolCall("weather", {"city": "Paris"}), ToolCall("news", {"topic": "rain"})],
        tc("news", topic="rain") + tc("weather", city="Paris"),
    ),
]
REJECTED = [
    ("string for integer", W(days=70), tc("weather", city="Paris", days="70"), "wrong_type"),
    ("string for boolean", W(detailed=True), tc("weather", city="Paris", detailed="true"), "wrong_type"),
    ("number for string", W(city="70"), tc("weather", city=70), "wrong_type"),
    ("wrong value", W(days=2), tc("weather", city="Paris", days=3), "argument_value"),
    ("missing required", W(), tc("weather", days=1), "missing_argument"),
    ("left-out non-default", W(days=3), tc("weather", city="Paris"), "missing_argument"),
    ("unknown argument", W(), tc("weather", city="Paris", color="red"), "unexpected_argument"),
    ("non-default extra", W(), tc("weather", city="Paris", days=4), "unexpected_argument"),
    ("extra call", W(), tc("weather", city="Paris") * 2, "call_count"),
    ("other function", W(), tc("news", topic="Paris"), "function_name"),
    (
        "swapped parallel values",
        [ToolCall("weather", {"city": "Paris", "days": 1}), ToolCall("weather", {"city": "Oslo", "days": 2})],
        tc("weather", city="Paris", days=2) + tc("weather", city="Oslo", days=1),
        "argument_value",
    ),
    ("a message", W(), "It is sunny in Paris.", "decision_mismatch"),
]


@pytest.mark.parametrize("label,expert_calls,candidate", CREDITED, ids=[c[0] for c in CREDITED])
def test_rule_R10_expert_calls_alone_credits(label, expert_calls, candidate):
    assert judge(expert_calls, candidate) == (1.0, "equivalent:structural")


@pytest.mark.parametrize("label,expert_calls,candidate,code", REJECTED, ids=[c[0] for c in REJECTED])
def test_rule_R10_expert_calls_alone_rejects(label, expert_calls, candidate, code):
    assert judge(expert_calls, candidate) == (0.0, code)


def test_rule_R10_sequential_calls_keep_their_order_without_a_simulator_state():
    calls = [ToolCall("cd", {"folder": "a"}), ToolCall("mkdir", {"dir_name": "b"})]
    ctx = VerifyContext.from_turn("tooluse/bfcl-multi-turn-v0", [], calls, env_factory=multi_env)
    assert V.verify(ctx, tc("cd", folder="a") + tc("mkdir", dir_name="b")).reward == 1.0
    swapped = V.verify(ctx, tc("mkdir", dir_name="b") + tc("cd", folder="a"))
    assert swapped.reward == 0.0 and reason_code(swapped) == "function_name"


def test_rule_R10_executed_calls_compare_strings_exactly():
    ctx = context(multi_env, expert(multi_env(), "multi_turn_base_0").turn(0))
    padded = (
        "<tool_call>"
        + json.dumps({"name": "cd", "arguments": {"folder": "document"}})
        + "</tool_call>"
        + tc("mkdir", dir_name=" temp ")
        + tc("mv", source="final_report.pdf", destination=" temp ")
    )
    verdict = V.verify(ctx, padded)
    assert verdict.reward == 0.0 and reason_code(verdict) in ("state_mismatch", "result_mismatch")


def test_rule_R11_hostile_input_is_a_parse_error():
    for text in (
        '<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}',
        "[" * 50_000,
        '{"name": "weather", "arguments": {"city": "\\ud800"}}',
    ):
        assert judge(W(), text)[1] == "parse_error"
    assert judge(W(), '\ufeff{"name": "weather", "arguments": {"city": "Paris"}}')[0] == 1.0


# ------------------------------------------------------------------------- the public API
def test_from_turn_with_a_task_id_uses_what_the_task_knows():
    env = single_env()
    turn = expert(env, "simple_python_0").turn(0)
    known = VerifyContext.from_turn(
        "tooluse/bfcl-simple-v0", turn.prefix, turn.expert, task_id="simple_python_0", env_factory=single_env
    )
    alone = VerifyContext.from_turn(
        "tooluse/bfcl-simple-v0",
        turn.prefix,
        turn.expert,
        tools=env.tools_for(env.get_task("simple_python_0")),
        env_factory=single_env,
    )
    candidate = tc("calculate_triangle_area", base=10, height=5, unit="units")
    assert V.verify(known, candidate).components["layer"] == "answers"
    assert V.verify(alone, candidate).components["layer"] == "expert_calls"
    assert V.verify(known, candidate).reward == V.verify(alone, candidate).reward == 1.0


def test_pivotgym_verify_cli_on_a_tooluse_turn(tmp_path, capsys):
    turn = tmp_path / "turn.json"
    turn.write_text(
        json.dumps(
            {
                "messages": [{"role": "user", "content": "Weather in Paris?"}],
                "tools": TOOLS,
                "expert": [{"name": "weather", "arguments": {"city": "Paris", "days": 2}}],
            }
        )
    )
    cands = tmp_path / "c.jsonl"
    cands.write_text(
        json.dumps(tc("weather", days=2.0, city="Paris"))
        + "\n"
        + json.dumps({"text": "weather(city='Paris', days='2')"})
        + "\n"
    )
    assert (
        main(["verify", "--env", "tooluse/bfcl-simple-v0", "--turn", str(turn), "--candidates", str(cands), "--json"])
        == 0
    )
    results = json.loads(capsys.readouterr().out)
    assert [(r["reward"], r["code"]) for r in results] == [(1.0, "equivalent:structural"), (0.0, "wrong_type")]
    assert results[0]["verifier"] == {"name": "tooluse/functional", "version": ToolCallVerifier.version}
