"""The profiler on the arith test plugin with the real HF sampling code (tiny random Llama)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pivotgym.jsonl import read_jsonl, read_profiles, write_trajectories
from pivotgym.pivot import AdaptiveK, ProfileConfig, Profiler
from pivotgym.sampling.base import SamplingParams

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6)


def arith_trajectories(env_id: str = "arith/chain-v0", n: int = 2) -> list:
    from pivotgym.registry import make

    return list(make(env_id).expert_trajectories("train", limit=n))


class CountingSampler:
    """Wraps a real sampler and counts the completions it produced (to prove cached states cost nothing)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls: list[int] = []

    def sample(self, prompts, n=1, params=None):
        self.calls.append(n * len(prompts))
        return self.inner.sample(prompts, n, params)

    def describe(self):
        return self.inner.describe()


def test_profiles_every_turn_in_the_standard_format(
    pivot_registry: object, tiny_sampler: object, tmp_path: Path
) -> None:
    trajectories = arith_trajectories()
    n_turns = sum(len(t.turns()) for t in trajectories)
    out = tmp_path / "profiles.jsonl"
    result = Profiler(tiny_sampler, ProfileConfig(k=3, params=PARAMS), "serial").profile(
        trajectories, out, progress=False
    )
    rows = read_jsonl(out)
    assert len(rows) == n_turns == result.stats["profiled"]
    expected_fields = {
        "trajectory_id",
        "turn",
        "env_id",
        "task_id",
        "k",
        "rewards",
        "mean",
        "var",
        "reasons",
        "reference",
        "verifier",
        "key",
    }
    assert expected_fields <= set(rows[0])
    assert [(r["trajectory_id"], r["turn"]) for r in rows] == [
        (t.id, n) for t in trajectories for n in range(len(t.turns()))
    ]
    for row in rows:
        assert row["k"] == 3 and len(row["rewards"]) == 3 == len(row["reasons"])
        assert row["verifier"] == {"name": "arith/value", "version": "1"}
        assert row["reference"]["backend"] == "hf" and row["reference"]["sampling"]["max_new_tokens"] == 6
        assert row["metadata"]["prompt_tokens"] > 10
        assert all(0.0 <= r <= 1.0 for r in row["rewards"])
    assert len({r["key"] for r in rows}) == len(rows)
    assert result.stats["samples"] == 3 * n_turns

    # the exact-match verifier is a different profile (a different key)
    exact = Profiler(tiny_sampler, ProfileConfig(k=3, params=PARAMS, verifier="exact"), "serial").plan(trajectories)
    assert exact[0].verifier == "exact" and exact[0].key != rows[0]["key"]


def test_rerun_skips_cached_states_and_is_deterministic(
    pivot_registry: object, tiny_sampler: object, tmp_path: Path
) -> None:
    trajectories = arith_trajectories(n=1)
    config = ProfileConfig(k=2, params=PARAMS, seed=7)
    first = tmp_path / "a.jsonl"
    Profiler(tiny_sampler, config, "serial").profile(trajectories, first, progress=False)
    counting = CountingSampler(tiny_sampler)
    again = Profiler(counting, config, "serial").profile(trajectories, first, progress=False)
    assert counting.calls == [] and again.stats["cached"] == again.stats["states"]
    assert first.read_text().count("\n") == again.stats["states"]  # nothing duplicated

    second = tmp_path / "b.jsonl"
    Profiler(tiny_sampler, config, "serial").profile(trajectories, second, progress=False)
    assert first.read_bytes() == second.read_bytes()

    # a different seed is a different profile
    other = Profiler(tiny_sampler, ProfileConfig(k=2, params=PARAMS, seed=8), "serial").plan(trajectories)
    assert other[0].key != read_jsonl(first)[0]["key"]


def test_hung_and_crashing_verifiers_fail_their_samples_and_the_run_goes_on(
    pivot_registry: object, tiny_sampler: object, tmp_path: Path
) -> None:
    trajectories = arith_trajectories("flaky/chain-v0", n=1)
    assert len(trajectories[0].turns()) >= 3
    config = ProfileConfig(k=2, params=PARAMS, timeout=2.0)
    from pivotgym.execution import ProcessExecutor

    with ProcessExecutor(workers=2, timeout=2.0) as pool:
        start = time.monotonic()
        result = Profiler(tiny_sampler, config, pool).profile(trajectories, tmp_path / "p.jsonl", progress=False)
        assert time.monotonic() - start < 60
    by_turn = {p.turn: p for p in result.profiles}
    # failed verifications are no rewards: counted and explained, never part of mean/var
    assert all(r.startswith("verify_failed: timeout") for r in by_turn[0].undecided)
    assert all(r.startswith("verify_failed: crashed") for r in by_turn[1].undecided)
    for turn in (0, 1):
        assert by_turn[turn].rewards == [] and by_turn[turn].k == 0 and len(by_turn[turn].undecided) == 2
        assert by_turn[turn].var == 0.0
    assert by_turn[2].undecided == [] and len(by_turn[2].rewards) == 2
    assert result.stats["verify_failures"] == 4


def test_adaptive_k_stops_uninformative_states_early(
    pivot_registry: object, tiny_sampler: object, tmp_path: Path
) -> None:
    trajectories = arith_trajectories(n=1)
    adaptive = AdaptiveK(max_mean=0.6, block=2)  # derived unanimity run at K=16: 14 (bound <= 0.05)
    assert adaptive.unanimous_after(16) == 14
    result = Profiler(tiny_sampler, ProfileConfig(k=16, params=PARAMS, adaptive=adaptive), "serial").profile(
        trajectories, tmp_path / "p.jsonl", progress=False
    )
    for p in result.profiles:  # gibberish never equals the answer: all-fail, settled after 14 samples
        assert p.k == 14 and p.metadata["stopped"] == "unanimous" and p.metadata["k_max"] == 16
        assert p.metadata["adaptive"]["min_unanimous"] == 14 and p.metadata["adaptive"]["miss_bound"] <= 0.05
    assert result.stats["samples"] == 14 * len(result.profiles)


def test_a_failed_verdict_is_counted_not_scored(
    pivot_registry: object, tiny_sampler: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state whose judged samples all pass stays all-pass (not a pivot) when one verification ran out of
    budget: the undecided verdict goes to the row's ``undecided``, not its rewards."""
    from pivotgym.pivot import profile as profile_module
    from pivotgym.pivot.select import SelectionRule
    from pivotgym.types import Verdict

    calls: list[int] = []

    def verify(task: profile_module.VerifyTask) -> list[dict]:
        out = []
        for _ in task.candidates:
            calls.append(1)
            verdict = (
                Verdict.undecided_because("search budget exhausted") if len(calls) == 2 else Verdict.ok("equivalent")
            )
            out.append({"reward": verdict.reward, "reason": verdict.reason, "undecided": verdict.undecided})
        return out

    monkeypatch.setattr(profile_module, "verify_candidates", verify)
    result = Profiler(tiny_sampler, ProfileConfig(k=4, params=PARAMS), "serial").profile(
        arith_trajectories(n=1)[:1], tmp_path / "p.jsonl", progress=False, limit=1
    )
    row = result.profiles[0]
    assert row.rewards == [1.0, 1.0, 1.0] and row.mean == 1.0 and row.var == 0.0
    assert row.undecided == ["search budget exhausted"]
    assert not SelectionRule(max_mean=1.01).admits(row)
    assert read_jsonl(tmp_path / "p.jsonl")[0]["undecided"] == ["search budget exhausted"]


def _save(path: Path, trajectories: list) -> None:
    write_trajectories(path, trajectories)


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_resume_after_sigkill_writes_the_same_file(
    pivot_registry: object, pivot_site: Path, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from pivotgym.registry import make

    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=4))
    total = sum(len(t.turns()) for t in trajectories)
    source = tmp_path / "trajs.jsonl"
    _save(source, trajectories)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(pivot_site), os.environ.get("PYTHONPATH", "")]),
        PIVOTGYM_LOAD_PLUGINS="arith,flaky",
        OMP_NUM_THREADS="1",
    )

    def command(out: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pivotgym.cli",
            "profile",
            "-t",
            str(source),
            "-o",
            str(out),
            "--model",
            str(tiny_model_dir),
            "--k",
            "2",
            "--max-new-tokens",
            "4",
            "--executor",
            "serial",
            "--seed",
            "3",
            "--chunk",
            "1",
            "--json",
        ]

    killed = tmp_path / "killed.jsonl"
    proc = subprocess.Popen(command(killed), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if killed.exists() and killed.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rows_at_kill = killed.read_bytes().count(b"\n") if killed.exists() else 0
    assert 0 < rows_at_kill < total, "the run should have been killed part-way"

    resumed = subprocess.run(command(killed), env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    stats = json.loads(resumed.stdout)
    assert stats["cached"] == rows_at_kill and stats["profiled"] == total - rows_at_kill

    # an uninterrupted run with the same settings, in this process
    from pivotgym.sampling.hf import HFSampler

    clean = tmp_path / "clean.jsonl"
    config = ProfileConfig(k=2, params=SamplingParams(max_new_tokens=4, temperature=1.0, top_p=1.0), seed=3, chunk=1)
    Profiler(HFSampler(str(tiny_model_dir)), config, "serial").profile(trajectories, clean, progress=False)
    assert killed.read_bytes() == clean.read_bytes()
    assert len(read_profiles(clean)) == total


class RecordingSampler:
    """Answers every prompt with the same text and records the generation cap of every call."""

    def __init__(self) -> None:
        self.caps: list[int] = []

    def sample(self, prompts, n=1, params=None):
        from pivotgym.types import Completion

        self.caps.append(params.max_new_tokens)
        return [[Completion("7") for _ in range(n)] for _ in prompts]

    def describe(self):
        return {"model": "recording", "revision": None, "backend": "test"}


@pytest.mark.parametrize(
    "params,own,want",
    [
        (None, 5, 5),  # the env's own limit, not a profiler default
        (SamplingParams(max_new_tokens=3), 5, 3),  # a cap shortens it
        (SamplingParams(max_new_tokens=128), 5, 5),  # and never lengthens it
        (None, None, 256),  # an env without a limit of its own: pivotgym.env.DEFAULT_MAX_NEW_TOKENS
        (SamplingParams(max_new_tokens=40), None, 40),
    ],
)
def test_samples_are_capped_by_the_envs_own_generation_limit(
    pivot_registry: object, monkeypatch: pytest.MonkeyPatch, params: SamplingParams | None, own: int | None, want: int
) -> None:
    from pivotgym_arith.env import ArithChainEnv

    monkeypatch.setattr(ArithChainEnv, "max_new_tokens", own)
    sampler = RecordingSampler()
    result = Profiler(sampler, ProfileConfig(k=2, params=params), "serial").profile(
        arith_trajectories(n=1), progress=False, limit=2
    )
    assert set(sampler.caps) == {want}
    assert {p.reference["sampling"]["max_new_tokens"] for p in result.profiles} == {want}  # part of each key


def test_the_same_weights_in_another_folder_draw_the_same_samples(
    pivot_registry: object, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The random stream follows the weights (the folder's revision), not where they lie: a run folder given
    with ``--out`` elsewhere profiles the same; other weights draw other samples."""
    import shutil

    import torch

    from pivotgym.sampling.hf import HFSampler

    copy = Path(shutil.copytree(tiny_model_dir, tmp_path / "elsewhere" / "model"))
    changed = HFSampler(str(copy))
    with torch.no_grad():
        next(changed.model.parameters()).add_(1e-3)
    changed.model.save_pretrained(tmp_path / "changed")
    changed.tokenizer.save_pretrained(tmp_path / "changed")
    trajectories = arith_trajectories(n=1)
    config = ProfileConfig(k=2, params=PARAMS, seed=7)

    def plan(folder: Path) -> list:
        return Profiler(HFSampler(str(folder)), config, "serial").plan(trajectories)

    here, there, other = plan(tiny_model_dir), plan(copy), plan(tmp_path / "changed")
    assert [s.stream for s in here] == [s.stream for s in there]
    assert [s.key for s in here] == [s.key for s in there]
    assert all(a.stream != b.stream for a, b in zip(here, other))
    out_here, out_there = tmp_path / "here.jsonl", tmp_path / "there.jsonl"
    Profiler(HFSampler(str(tiny_model_dir)), config, "serial").profile(trajectories, out_here, progress=False)
    Profiler(HFSampler(str(copy)), config, "serial").profile(trajectories, out_there, progress=False)
    rewards = [(r["key"], r["rewards"], r["reasons"]) for r in read_jsonl(out_here)]
    assert rewards == [(r["key"], r["rewards"], r["reasons"]) for r in read_jsonl(out_there)]
