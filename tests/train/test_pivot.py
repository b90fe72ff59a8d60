"""The pivot trainer end to end on the arith plugin env with the tiny model: counters, metrics, filtering,
checkpoints, kill-and-resume and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from core_helpers import cli_env
from train_testlib import register_test_verifier, write_arith_data

from pivotgym.jsonl import read_jsonl
from pivotgym.train import PivotConfig, PivotTrainer

WORKER = Path(__file__).with_name("resume_worker.py")


def small_config(data: Path, out: Path, **overrides) -> PivotConfig:
    settings = dict(
        output_dir=str(out),
        pivots=str(data / "pivots.jsonl"),
        trajectories=str(data / "expert.jsonl"),
        steps=2,
        group_size=4,
        pivots_per_step=2,
        max_new_tokens=6,
        verifier="test/even-length",
        eval_pivots=2,
        eval_samples=2,
        learning_rate=1e-3,
        report_to=["none"],
        progress=False,
    )
    return PivotConfig(**{**settings, **overrides})


@pytest.fixture()
def arith_data(arith_registry, tmp_path):
    register_test_verifier()
    write_arith_data(tmp_path / "data", n_trajectories=2)
    return tmp_path / "data"


def test_pivot_run_counts_logs_and_checkpoints(arith_data, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=1)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = PivotTrainer(small_config(arith_data, tmp_path / "run", eval_every=1), model=model, tokenizer=tokenizer)
    summary = trainer.fit()
    counters = summary["counters"]
    n_pivots = len(trainer.states)
    assert counters["profiling_turns"] == 4 * n_pivots
    assert counters["rollout_turns"] + counters["filtered_turns"] == 2 * 2 * 4
    assert counters["total_turns"] == counters["rollout_turns"] + counters["filtered_turns"] + 4 * n_pivots
    assert counters["eval_turns"] == 3 * 2 * 2  # evals at steps 0, 1, 2; 2 states x 2 samples
    assert counters["tokens_generated"] > 0 and counters["tokens_trained"] <= counters["tokens_generated"]
    assert counters["wall_seconds"] >= counters["seconds_generation"] + counters["seconds_fwd_bwd"] - 1e-6
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [(r["kind"], r["step"]) for r in rows] == [("eval", 0), ("train", 1), ("eval", 1), ("train", 2), ("eval", 2)]
    assert all({"rollout_turns", "seconds_generation", "seconds_other"} <= set(r) for r in rows)
    # the rollouts' recorded logprobs (the sampler's) agree with the policy's recomputed ones (fp32)
    updates = [r for r in rows if r["kind"] == "train" and not r.get("skipped")]
    assert updates and all(abs(r["sampler_ratio"] - 1.0) < 1e-3 and r["sampler_logprob_gap"] < 1e-3 for r in updates)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 2
    assert [c["step"] for c in summary["eval_curve"]] == [0, 1, 2]
    assert (tmp_path / "run" / "checkpoints" / "step-000002" / "trainer_state.json").is_file()
    if counters["rollout_turns"]:
        assert any(not torch.equal(a, b) for a, b in zip(before, trainer.unwrapped_model.parameters()))
    # applied counts beside the configured steps; drift and the informative share on every train row
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert counters["groups_sampled"] == 4 and counters["refill_groups"] == 0
    assert counters["steps_applied"] == sum(1 for r in train_rows if not r.get("skipped"))
    assert counters["optimizer_steps_applied"] == counters["steps_applied"]
    assert counters["groups_applied"] == sum(r["groups_informative"] for r in train_rows if not r.get("skipped"))
    assert all({"drift_rms", "informative_groups", "groups_informative", "lr_scale"} <= set(r) for r in train_rows)
    assert all(r["lr_scale"] == r["groups_informative"] / 2 for r in train_rows if not r.get("skipped"))


def test_functional_verifier_zero_variance_groups_are_filtered_and_change_nothing(arith_data, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=2)
    before = [p.detach().clone() for p in model.parameters()]
    # the real arith verifier: a random tiny model never computes the right value -> every group is flat
    config = small_config(arith_data, tmp_path / "run", verifier="functional", steps=1, eval_pivots=1)
    summary = PivotTrainer(config, model=model, tokenizer=tokenizer).fit()
    assert summary["counters"]["filtered_turns"] == 8 and summary["counters"]["rollout_turns"] == 0
    assert summary["counters"]["tokens_trained"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _worker(data: Path, out: Path, site: Path, kill_after: int | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, str(WORKER), str(data), str(out)] + ([str(kill_after)] if kill_after else [])
    env = cli_env(site, PIVOTGYM_LOAD_PLUGINS="arith", OMP_NUM_THREADS="1")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@pytest.mark.timeout(600)
def test_resume_after_kill_gives_the_same_weights(arith_data, plugin_site, tmp_path):
    straight = _worker(arith_data, tmp_path / "straight", plugin_site)
    assert straight.returncode == 0, straight.stderr[-3000:]
    killed = _worker(arith_data, tmp_path / "resumed", plugin_site, kill_after=3)
    assert killed.returncode == -9, killed.stderr[-3000:]
    ckpts = sorted(p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir())
    assert ckpts == ["step-000002"]
    resumed = _worker(arith_data, tmp_path / "resumed", plugin_site)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    final = "checkpoints/step-000004/pytorch_model.bin"
    a = torch.load(tmp_path / "straight" / final)
    b = torch.load(tmp_path / "resumed" / final)
    init = dict(a.items())
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert init  # non-empty state dict
    sa = json.loads((tmp_path / "straight" / "summary.json").read_text())
    sb = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    for key in ("rollout_turns", "filtered_turns", "tokens_generated", "tokens_trained", "eval_turns"):
        assert sa["counters"][key] == sb["counters"][key], key
    assert sa["final_eval"]["score"] == sb["final_eval"]["score"]
    steps = [(r["kind"], r["step"]) for r in read_jsonl(tmp_path / "resumed" / "metrics.jsonl")]
    assert steps == [(r["kind"], r["step"]) for r in read_jsonl(tmp_path / "straight" / "metrics.jsonl")]


def test_cli_trains_from_a_yaml_config(arith_data, tmp_path, capsys):
    import yaml

    from pivotgym.cli import main
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=4)
    model.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    config = small_config(arith_data, tmp_path / "cli-run", steps=1, eval_pivots=1).to_dict()
    config.update(model=str(tmp_path / "tiny"), trainer="pivot")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", "pivot", "--config", str(tmp_path / "cfg.yaml"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["trainer"] == "pivot" and summary["steps"] == 1
    assert summary["counters"]["rollout_turns"] + summary["counters"]["filtered_turns"] == 8
    (tmp_path / "bad.yaml").write_text("stepz: 3\n")
    assert main(["train", "pivot", "--config", str(tmp_path / "bad.yaml")]) == 1
    assert "stepz: unknown key (did you mean 'steps'?)" in capsys.readouterr().err


def test_failed_verifications_leave_the_group_instead_of_scoring_zero(arith_data, tmp_path):
    """An odd-length completion whose verifier ran out of budget used to count as reward 0 next to the
    even-length passes, inventing an advantage. Undecided, it leaves the group: what
    remains all passes, so nothing is trained on and the failures are counted."""
    from pivotgym.registry import get_registry
    from pivotgym.sampling.testing import tiny_llama
    from pivotgym.types import Verdict

    class EvenOrBudget:
        name = "test/even-or-budget"
        version = "1"

        def verify(self, context, candidate):
            if len(candidate) % 2 == 0:
                return Verdict.ok("even")
            return Verdict.undecided_because("search budget exhausted")

    registry = get_registry()
    if EvenOrBudget.name not in registry.verifiers:
        registry._register_verifiers("tests", EvenOrBudget.name, EvenOrBudget)
    model, tokenizer = tiny_llama(seed=1)
    trainer = PivotTrainer(
        small_config(arith_data, tmp_path / "run", steps=1, verifier=EvenOrBudget.name, group_size=6),
        model=model,
        tokenizer=tokenizer,
    )
    trainer.setup_data()
    stats = trainer.train_step(0)
    assert stats["failed_verifications"] > 0  # the tiny model writes odd lengths often
    assert stats["tokens_in_loss"] == 0 and stats["reward_mean"] == 1.0


def test_a_step_short_of_signal_is_skipped_and_the_summary_says_so(arith_data, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=1)
    before = [p.detach().clone() for p in model.parameters()]
    config = small_config(arith_data, tmp_path / "run", min_informative_groups=3)  # > pivots_per_step: never
    summary = PivotTrainer(config, model=model, tokenizer=tokenizer).fit()
    c = summary["counters"]
    assert (c["steps"], c["steps_applied"], c["optimizer_steps_applied"], c["groups_applied"]) == (2, 0, 0, 0)
    assert c["groups_sampled"] == 4 and c["tokens_trained"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["skip_reason"] for r in rows] == ["few_informative_groups"] * 2
    assert all(r["drift_rms"] == 0.0 for r in rows)


def test_refill_draws_more_pivots_up_to_its_bound_and_counts_their_rollouts(arith_data, tmp_path):
    from pivotgym.sampling.testing import tiny_llama

    model, tokenizer = tiny_llama(seed=1)
    config = small_config(
        arith_data, tmp_path / "run", steps=1, refill=True, refill_rounds=2, min_informative_groups=3, eval_pivots=1
    )
    trainer = PivotTrainer(config, model=model, tokenizer=tokenizer)
    trainer.setup_data()
    stats = trainer.train_step(0)
    drawn = 2 + stats["refilled_pivots"]
    assert stats["refilled_pivots"] in (2, 4) and stats["groups"] == drawn  # whole rounds of pivots_per_step
    assert trainer.data_state["cursor"] == drawn  # the next states of the seeded order: resumable
    c = trainer.counters
    assert c.refill_groups == drawn - 2 and c.groups_sampled == drawn
    assert c.rollout_turns + c.filtered_turns == 4 * drawn  # refill rollouts are counted like the first round's
    if stats["refilled_pivots"] == 2:  # stopped early: it had enough
        assert stats["groups_informative"] >= 3 and not stats.get("skipped")
    if stats.get("skipped"):
        assert stats["groups_informative"] < 3 and c.steps_applied == 0
    # without refill the same step is one round
    plain = PivotTrainer(
        small_config(arith_data, tmp_path / "plain", steps=1), model=tiny_llama(seed=1)[0], tokenizer=tokenizer
    )
    plain.setup_data()
    assert plain.train_step(0)["groups"] == 2 and plain.data_state["cursor"] == 2


def test_non_pivot_training_states_are_scored_greedily_at_each_evaluation(arith_data, tmp_path):
    """The profiled turns that were not selected as pivots (profiles minus pivots), drawn by the seed, are
    scored greedily beside the eval pivots."""
    from pivotgym.jsonl import read_pivot_set, write_pivot_set, write_profiles
    from pivotgym.sampling.testing import tiny_llama
    from pivotgym.types import PivotSet

    every = read_pivot_set(arith_data / "pivots.jsonl")
    write_profiles(tmp_path / "profiles.jsonl", every.pivots)
    half = every.pivots[: len(every.pivots) // 2]
    write_pivot_set(tmp_path / "half.jsonl", PivotSet(every.rule, half))
    model, tokenizer = tiny_llama(seed=3)
    settings = dict(pivots=str(tmp_path / "half.jsonl"), profiles=str(tmp_path / "profiles.jsonl"), steps=1)
    trainer = PivotTrainer(
        small_config(arith_data, tmp_path / "run", non_pivot_eval=3, **settings), model=model, tokenizer=tokenizer
    )
    summary = trainer.fit()
    pivots = {(p.trajectory_id, p.turn) for p in half}
    held = [(s.turn.trajectory_id, s.turn.turn) for s in trainer.non_pivot_states]
    assert len(held) == min(3, len(every.pivots) - len(half)) and not set(held) & pivots
    evals = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if r["kind"] == "eval"]
    assert [r["eval_non_pivot_states"] for r in evals] == [len(held)] * 2
    assert all(0.0 <= r["eval_non_pivot_pass"] <= 1.0 for r in evals)
    assert summary["final_eval"]["non_pivot_pass"] == evals[-1]["eval_non_pivot_pass"]
    assert summary["counters"]["eval_turns"] == 2 * (2 * 2 + len(held))  # greedy: one completion per state
    again = PivotTrainer(
        small_config(arith_data, tmp_path / "again", non_pivot_eval=3, **settings), model=model, tokenizer=tokenizer
    )
    again.setup_data()
    assert [(s.turn.trajectory_id, s.turn.turn) for s in again.non_pivot_states] == held  # same seed, same states
    given = PivotTrainer(
        small_config(arith_data, tmp_path / "given", non_pivot_eval=1, **settings),
        model=model,
        tokenizer=tokenizer,
        non_pivot_states=trainer.non_pivot_states,
    )
    given.setup_data()
    assert given.non_pivot_states == trainer.non_pivot_states[:1]  # passed in: the first non_pivot_eval
