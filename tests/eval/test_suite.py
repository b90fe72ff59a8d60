"""Suite evaluation on a tiny real model (loglik, generated and multi-turn members), resume, ci95 and compare."""

from __future__ import annotations

import json
import math

import pytest

from pivotgym.cli import main
from pivotgym.errors import ConfigError
from pivotgym.eval import ci95, compare, evaluate_suite, format_comparison, loglik_scores, summarize
from pivotgym.jsonl import read_jsonl


@pytest.fixture(scope="module")
def tiny_sampler():
    from pivotgym.sampling.hf import HFSampler
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=1)
    return HFSampler(model, tokenizer, max_batch_size=16)


def test_wilson_interval_matches_known_values():
    lo, hi = ci95([1.0] * 8 + [0.0] * 2)  # 8/10
    assert math.isclose(lo, 0.4902, abs_tol=1e-3) and math.isclose(hi, 0.9433, abs_tol=1e-3)
    lo, hi = ci95([0.0] * 20)
    assert lo == 0.0 and math.isclose(hi, 0.1611, abs_tol=1e-3)
    lo, hi = ci95([0.5, 0.7, 0.9])  # not 0/1: normal approximation around the mean
    assert math.isclose((lo + hi) / 2, 0.7) and math.isclose(hi - 0.7, 1.96 * 0.2 / math.sqrt(3), rel_tol=1e-3)
    assert summarize([1.0, 0.0, 1.0, 1.0], "acc")["value"] == 0.75
    assert ci95([0.0, 0.0, 0.0, 0.1667, 0.0833])[0] == 0.0  # a share's interval is clipped to [0, 1]
    assert ci95([1.0, 1.0, 0.9, 1.0])[1] == 1.0
    assert ci95([-2.0, 2.0])[0] < -1.0  # a score that is not a share is not clipped


def _result(model, scores, roles):
    return {
        "suite": "s",
        "model": model,
        "role": roles,
        "scores": {k: {"metric": "acc", "value": v, "n": 50, "ci95": [v, v]} for k, v in scores.items()},
    }


def test_compare_arithmetic():
    roles = {"a/x-v0@test": "in_domain", "a/y-v0@test": "in_domain", "g/p-v0": "ood", "g/q-v0": "ood", "g/r-v0": "ood"}
    base = _result(
        "base", {"a/x-v0@test": 0.20, "a/y-v0@test": 0.40, "g/p-v0": 0.50, "g/q-v0": 0.30, "g/r-v0": 0.9}, roles
    )
    trained = _result("rl", {"a/x-v0@test": 0.50, "a/y-v0@test": 0.50, "g/p-v0": 0.45, "g/q-v0": 0.33}, roles)
    comp = compare(base, trained)
    deltas = {r["env"]: round(r["delta"], 6) for r in comp["rows"]}
    assert deltas == {"a/x-v0@test": 0.3, "a/y-v0@test": 0.1, "g/p-v0": -0.05, "g/q-v0": 0.03}
    assert math.isclose(comp["averages"]["in_domain"]["delta"], 0.2)
    assert math.isclose(comp["averages"]["ood"]["delta"], -0.01)
    assert math.isclose(comp["averages"]["ood"]["base"], 0.4)  # only envs scored in both are averaged
    assert comp["only_base"] == ["g/r-v0"]
    table = format_comparison(comp)
    assert "average in_domain" in table and "+20.0" in table and "-1.0" in table


def test_compare_cli_json(tmp_path, capsys):
    roles = {"a/x-v0": "in_domain", "g/p-v0": "ood"}
    (tmp_path / "base.json").write_text(json.dumps(_result("base", {"a/x-v0": 0.25, "g/p-v0": 0.5}, roles)))
    (tmp_path / "new.json").write_text(json.dumps(_result("new", {"a/x-v0": 0.75, "g/p-v0": 0.5}, roles)))
    assert main(["compare", str(tmp_path / "base.json"), str(tmp_path / "new.json"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["averages"]["in_domain"]["delta"] == 0.5 and data["averages"]["ood"]["delta"] == 0.0
    (tmp_path / "bad.json").write_text("{}")
    assert main(["compare", str(tmp_path / "bad.json"), str(tmp_path / "new.json")]) == 1
    assert "not a suite result" in capsys.readouterr().err


def test_loglik_scores_pick_the_most_likely_option(tiny_sampler):
    context = "The colour of the sky is"
    options = [" blue", " green and purple", " red"]
    totals = []
    ctx = tiny_sampler.encode(context)
    for opt in options:
        ids = tiny_sampler.encode(context + opt)[len(ctx) :]
        totals.append(sum(tiny_sampler.score(ctx, ids)))
    best = max(range(3), key=totals.__getitem__)
    rows = loglik_scores(tiny_sampler, [(context, options, best), (context, options, (best + 1) % 3)])
    assert [r["acc"] for r in rows] == [1.0, 0.0]


def test_evaluate_suite_on_tiny_model_with_resume(tiny_sampler, tmp_path):
    suite = {"general/navigate-v0": "ood", "general/word-sorting-v0": "ood"}
    out = tmp_path / "scores.json"
    result = evaluate_suite(suite, tiny_sampler, out, limit=3, max_new_tokens=4, progress=False)
    assert set(result["scores"]) == set(suite) and result["role"] == suite
    nav = result["scores"]["general/navigate-v0"]
    assert nav["metric"] == "accuracy" and nav["n"] == 3 and 0.0 <= nav["ci95"][0] <= nav["value"] <= nav["ci95"][1]
    assert result["scores"]["general/word-sorting-v0"]["metric"] == "accuracy"
    assert result["averages"]["ood"] == pytest.approx(
        (nav["value"] + result["scores"]["general/word-sorting-v0"]["value"]) / 2
    )
    assert json.loads(out.read_text())["scores"] == result["scores"]
    items = read_jsonl(str(out) + ".items.jsonl")
    assert len(items) == 6
    again = evaluate_suite(suite, tiny_sampler, out, limit=3, max_new_tokens=4, progress=False)
    assert len(read_jsonl(str(out) + ".items.jsonl")) == 6  # nothing re-scored
    assert {k: v["value"] for k, v in again["scores"].items()} == {k: v["value"] for k, v in result["scores"].items()}
    more = evaluate_suite(suite, tiny_sampler, out, limit=4, max_new_tokens=4, progress=False)
    assert len(read_jsonl(str(out) + ".items.jsonl")) == 8 and more["scores"]["general/navigate-v0"]["n"] == 4


def test_multi_turn_members_run_greedy_episodes(tiny_sampler, arith_registry, tmp_path):
    result = evaluate_suite(
        {"arith/chain-v0@test": "in_domain"},
        tiny_sampler,
        tmp_path / "s.json",
        limit=1,
        max_new_tokens=3,
        progress=False,
    )
    score = result["scores"]["arith/chain-v0@test"]
    assert score["metric"] == "success" and score["n"] == 1 and score["value"] == 0.0  # gibberish model
    items = read_jsonl(tmp_path / "s.json.items.jsonl")
    assert all(1 <= row["turns"] <= 8 for row in items)


def test_unknown_member_is_a_clear_error(tiny_sampler):
    with pytest.raises(KeyError, match="no member"):
        evaluate_suite("ood-quick", tiny_sampler, None, members=["general/nope-v0"], progress=False)


def test_example_script_evaluates_and_compares(tmp_path, monkeypatch):
    import importlib.util
    from pathlib import Path

    from pivotgym.registry import reset_registry

    script = Path(__file__).resolve().parents[2] / "examples" / "eval_and_compare.py"
    spec = importlib.util.spec_from_file_location("eval_and_compare", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.delenv("PIVOTGYM_ENV_PATH", raising=False)
    try:
        comp = module.main(["--tiny", "--limit", "2", "--out", str(tmp_path)])
    finally:
        monkeypatch.delenv("PIVOTGYM_ENV_PATH", raising=False)
        reset_registry()
    assert [r["env"] for r in comp["rows"]] == [
        "trivia/capitals-v0@test",
        "general/navigate-v0",
        "general/sports-understanding-v0",
    ]
    assert comp["averages"]["in_domain"]["n_envs"] == 1 and comp["averages"]["ood"]["n_envs"] == 2


def test_eval_cli_writes_a_suite_result(tmp_path, capsys):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=3)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "scores.json"
    assert (
        main(
            [
                "eval",
                "--suite",
                "ood-quick",
                "--model",
                str(tmp_path / "model"),
                "--out",
                str(out),
                "--limit",
                "2",
                "--member",
                "general/navigate-v0",
                "--json",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    assert printed["scores"] == saved["scores"] and saved["suite"] == "ood-quick"
    assert list(saved["scores"]) == ["general/navigate-v0"] and saved["scores"]["general/navigate-v0"]["n"] == 2
    assert main(["eval", "--suite", "no-such-suite", "--model", str(tmp_path / "model"), "--out", str(out)]) == 1
    assert "unknown suite" in capsys.readouterr().err


def test_a_suite_wide_generation_cap_never_lengthens_a_short_answer_env(tmp_path):
    """The experiment's eval max_new_tokens (64) must not make a letter-answer env generate 64 tokens."""
    from pivotgym.types import Completion

    class Recorder:
        def __init__(self):
            self.caps = []

        def describe(self):
            return {"model": "recorder"}

        def sample(self, prompts, n=1, params=None):
            self.caps.append(params.max_new_tokens)
            return [[Completion("(A)")] for _ in prompts]

    rec = Recorder()
    evaluate_suite(
        {"general/navigate-v0": "ood", "general/word-sorting-v0": "ood"},
        rec,
        None,
        limit=2,
        max_new_tokens=64,
        progress=False,
    )
    assert rec.caps == [8, 48]
    rec.caps.clear()
    evaluate_suite({"general/word-sorting-v0": "ood"}, rec, None, limit=2, max_new_tokens=16, progress=False)
    assert rec.caps == [16]


def _coin_env():
    """One turn; the reply scores 1 when its length is even, so a sampled model lands on either side. Task
    `judge` cannot be scored without a judge (its final info says undecided)."""
    from pivotgym import AgentEnv, StepOutcome, Task
    from pivotgym.types import message

    class Coin(AgentEnv):
        splits = ("test",)
        max_turns = 1
        max_new_tokens = 6

        def load_tasks(self, split):
            return [Task(name, split, {}) for name in ("a", "b", "c", "judge")]

        def initial_messages(self, task):
            return [message("user", "Flip a coin.")]

        def apply_action(self, action):
            info = {"undecided": "needs a judge"} if self.task.id == "judge" else {}
            return StepOutcome([], reward=float(len(action) % 2 == 0), terminated=True, info=info)

    return Coin


def test_pass_hat_k_members_sample_k_episodes_per_task_seeded_by_the_task(tiny_sampler, tmp_path):
    """`:pass^K` runs K sampled episodes per task: an item is 1 when all K succeed, the score carries
    pass^1..pass^K, a task draws the same episodes alone or beside others, and a task the env cannot score is
    left out and counted."""
    import pivotgym
    from pivotgym.registry import reset_registry

    reset_registry()
    try:
        pivotgym.register("coin/flip-v0", _coin_env(), verifier="exact")
        result = evaluate_suite(
            {"coin/flip-v0@test:pass^4": "in_domain"}, tiny_sampler, tmp_path / "s.json", progress=False
        )
        score = result["scores"]["coin/flip-v0@test:pass^4"]
        items = {row["task_id"]: row for row in read_jsonl(tmp_path / "s.json.items.jsonl")}
        assert score["metric"] == "pass^4" and score["n"] == 3 and score["undecided"] == 1
        assert items["judge"]["undecided"] == "needs a judge"
        scored = [items[t] for t in ("a", "b", "c")]
        assert all(r["episodes"] == 4 and r["reward"] == float(r["successes"] == 4) for r in scored)
        assert score["pass_hat"]["1"] == pytest.approx(sum(r["successes"] for r in scored) / 12)
        assert score["pass_hat"]["4"] == pytest.approx(score["value"])
        assert score["pass_hat"]["1"] >= score["pass_hat"]["2"] >= score["pass_hat"]["4"]
        assert 0 < sum(r["successes"] for r in scored) < 12  # the sampled episodes differ: not every flip alike
        alone = evaluate_suite(
            {"coin/flip-v0@test:pass^4": "in_domain"}, tiny_sampler, tmp_path / "b.json", progress=False, limit=2
        )
        assert alone["scores"]["coin/flip-v0@test:pass^4"]["per_item"]["b"] == score["per_item"]["b"]
        assert [r["successes"] for r in read_jsonl(tmp_path / "b.json.items.jsonl")] == [
            items["a"]["successes"],
            items["b"]["successes"],
        ]
        with pytest.raises(ConfigError, match=r"unknown measure 'pass\^0'.*:pass\^K"):
            evaluate_suite({"coin/flip-v0@test:pass^0": "in_domain"}, tiny_sampler, None, progress=False)
    finally:
        reset_registry()
