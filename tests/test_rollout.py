"""The one episode loop (:mod:`pivotgym.rollout`): evaluation and E2E training get the same return (the
sum of step rewards), the same score (the return capped at 1), and each multi-turn member shows progress."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
from core_helpers import CounterEnv

from pivotgym import StepOutcome
from pivotgym.eval import evaluate_suite
from pivotgym.jsonl import read_jsonl
from pivotgym.registry import EnvSpec, get_registry, make
from pivotgym.rollout import run_episodes
from pivotgym.sampling.base import SamplingParams
from pivotgym.types import Completion

PARAMS = SamplingParams(temperature=0.0, max_new_tokens=4)


class PayEachStepEnv(CounterEnv):
    """Pays 0.5 for every valid move and ends when the target is reached (a shaped reward)."""

    def apply_action(self, action):
        outcome = super().apply_action(action)
        return StepOutcome(outcome.observation, reward=0.5, terminated=outcome.terminated)


class Replies:
    """A sampler that always answers ``text``; counts calls and prompts; encodes a prompt as its characters."""

    def __init__(self, text: str = "add 1") -> None:
        self.text = text
        self.calls: list[tuple[int, int]] = []  # (prompts, n) per call

    def describe(self) -> dict[str, str]:
        return {"model": "replies"}

    def encode(self, messages) -> list[int]:
        return [ord(c) for m in messages for c in m["content"]]

    def sample(self, prompts, n=1, params=None):
        self.calls.append((len(prompts), n))
        return [[Completion(self.text, token_ids=[1, 2, 3]) for _ in range(n)] for _ in prompts]


@pytest.fixture()
def envs(monkeypatch):
    registry = get_registry()
    monkeypatch.setitem(registry.envs, "test/pay-v0", EnvSpec("test/pay-v0", PayEachStepEnv, "tests"))
    monkeypatch.setitem(registry.envs, "test/counter-v0", EnvSpec("test/counter-v0", CounterEnv, "tests"))
    return registry


def test_the_return_is_the_sum_of_step_rewards_and_the_score_caps_it(envs):
    # target 103 from 0 by `add 1`: the 6-turn limit truncates after 6 valid moves of 0.5 each
    (episodes,) = run_episodes(Replies(), lambda: make("test/pay-v0"), ["test-100"], PARAMS)
    (episode,) = episodes
    assert episode.rewards == [0.5] * 6 and episode.reward == 3.0 and episode.score == 1.0
    assert episode.truncated and not episode.terminated and episode.num_turns == 6 and episode.tokens == 18


def test_evaluation_records_the_score_and_the_return(envs, tmp_path):
    out = tmp_path / "s.json"
    result = evaluate_suite({"test/pay-v0@test": "in_domain"}, Replies(), out, limit=2, progress=False)
    items = read_jsonl(str(out) + ".items.jsonl")
    assert [(i["reward"], i["return"], i["turns"]) for i in items] == [(1.0, 3.0, 6), (1.0, 3.0, 6)]
    score = result["scores"]["test/pay-v0@test"]
    assert score["metric"] == "success" and score["value"] == 1.0
    assert score["per_item"] == {"test-100": 1.0, "test-101": 1.0}


def test_e2e_training_gets_the_same_return_from_the_same_loop(envs):
    from pivotgym.train.e2e import run_episodes as e2e_episodes

    timed: list[str] = []

    @contextlib.contextmanager
    def time(name):
        timed.append(name)
        yield

    trainer = SimpleNamespace(sampler=Replies(), counters=SimpleNamespace(time=time))
    (group,) = e2e_episodes(trainer, "test/pay-v0", [("test-100", 5)], 2, PARAMS)
    assert [e.reward for e in group] == [3.0, 3.0] and [e.score for e in group] == [1.0, 1.0]
    first = [ord(c) for c in "Reach 103 with `add K`, K in 1..3."]
    assert all(len(e.turns) == 6 and e.turns[0] == (first, [1, 2, 3]) for e in group)
    assert set(timed) == {"generation", "verification"}
    (evaluated,) = run_episodes(Replies(), lambda: make("test/pay-v0"), ["test-100"], PARAMS)
    assert evaluated[0].reward == group[0].reward


def test_episodes_start_where_a_replayed_prefix_leaves_the_env_and_only_sampled_turns_count(envs):
    # train-3: reach 6; the expert's `add 2`, `add 2` are replayed, then the policy's `add 2` solves it
    (episodes,) = run_episodes(
        Replies("add 2"),
        lambda: make("test/counter-v0"),
        ["train-3"],
        PARAMS,
        max_turns=1,
        tokens=True,
        starts=[["add 2", "add 2"]],
    )
    (episode,) = episodes
    assert episode.start == 2 and episode.num_turns == 1 and episode.reward == 1.0 and episode.terminated
    (prompt, _completion) = episode.turns[0]
    assert "value=4" in "".join(map(chr, prompt))  # the first sampled turn sees the replayed history
    (plain,) = run_episodes(Replies("add 2"), lambda: make("test/counter-v0"), ["train-3"], PARAMS, max_turns=1)
    assert plain[0].start == 0 and plain[0].reward == 0.0 and not plain[0].done


def test_a_prefix_that_ends_the_episode_or_a_wrong_number_of_prefixes_is_an_error(envs):
    with pytest.raises(ValueError, match="replayed action 2 of 2 ended the episode"):
        run_episodes(Replies(), lambda: make("test/counter-v0"), ["train-3"], PARAMS, starts=[["add 3", "add 3"]])
    with pytest.raises(ValueError, match="starts has 1 entries for 2 tasks"):
        run_episodes(Replies(), lambda: make("test/counter-v0"), ["train-0", "train-1"], PARAMS, starts=[[]])


class Varied(Replies):
    """Sample ``j`` of a prompt answers ``add 1 + j % 3``: the episodes of one task diverge after turn 0."""

    def sample(self, prompts, n=1, params=None):
        self.calls.append((len(prompts), n))
        self.seeds.append(params.seed)
        return [[Completion(f"add {1 + j % 3}", token_ids=[j]) for j in range(n)] for _ in prompts]

    def __init__(self) -> None:
        super().__init__()
        self.seeds: list[int | None] = []


def test_a_shared_prompt_is_sampled_once_n_times_and_diverged_episodes_alone(envs):
    sampler = Varied()
    groups = run_episodes(
        sampler, lambda: make("test/counter-v0"), ["test-100", "test-101"], PARAMS, n=3, max_turns=2, tokens=True
    )
    assert sampler.calls == [(2, 3), (6, 1)]  # turn 0: one prompt per task, n=3; turn 1: every episode once
    assert [len(g) for g in groups] == [3, 3] and all(e.num_turns == 2 and not e.done for g in groups for e in g)
    same = Replies()  # identical replies keep the episodes' prompts identical: still shared on turn 1
    run_episodes(same, lambda: make("test/counter-v0"), ["test-100", "test-101"], PARAMS, n=3, max_turns=2)
    assert same.calls == [(2, 3), (2, 3)]


def test_seeds_sample_each_prompt_under_its_own_seed(envs):
    sampler = Varied()
    run_episodes(
        sampler,
        lambda: make("test/counter-v0"),
        ["test-100", "test-101"],
        PARAMS,
        n=2,
        max_turns=2,
        seeds=lambda task, turn, slot: 1000 * task + 10 * turn + slot,
    )
    # turn 0: each task's shared prompt under slot 0; turn 1: episode j of each task alone under slot j + 1
    assert sampler.seeds == [0, 1000, 11, 12, 1011, 1012]


def test_batch_size_groups_tasks_in_lockstep(envs):
    sampler = Replies()
    run_episodes(sampler, lambda: make("test/counter-v0"), ["test-100", "test-101", "test-102"], PARAMS, batch_size=2)
    assert sampler.calls == [(2, 1)] * 6 + [(1, 1)] * 6


def test_each_multi_turn_member_shows_a_bar_over_its_episodes(envs, capsys):
    evaluate_suite(
        {"test/counter-v0@test": "in_domain", "general/navigate-v0": "ood"},
        Replies("(A)"),
        None,
        limit=2,
        progress=True,
    )
    err = capsys.readouterr().err
    assert "test/counter-v0@test" in err and "2/2 [" in err and "episode" in err
    assert "general/navigate-v0" in err and "item" in err
    evaluate_suite({"test/counter-v0@test": "in_domain"}, Replies(), None, limit=2, progress=False)
    assert capsys.readouterr().err == ""


class ProgressEnv(CounterEnv):
    """CounterEnv that reports how far the value is towards the target."""

    def progress(self):
        return min(1.0, self.value / self.task.data["target"])


def test_progress_is_read_at_each_episodes_end_and_the_env_limit_is_the_default_cap(envs, monkeypatch):
    monkeypatch.setitem(envs.envs, "test/progress-v0", EnvSpec("test/progress-v0", ProgressEnv, "tests"))
    # target 103: `add 1` six times reaches 6 when the env's own limit (6 turns) truncates the episode
    (episodes,) = run_episodes(Replies(), lambda: make("test/progress-v0"), ["test-100"], PARAMS, read_progress=True)
    assert episodes[0].num_turns == 6 and episodes[0].truncated
    assert episodes[0].progress == pytest.approx(6 / 103)
    (cut,) = run_episodes(Replies(), lambda: make("test/progress-v0"), ["test-100"], PARAMS, max_turns=2, n=2)
    assert [e.progress for e in cut] == [None, None]  # not asked for
    (cut,) = run_episodes(
        Replies(), lambda: make("test/progress-v0"), ["test-100"], PARAMS, max_turns=2, n=2, read_progress=True
    )
    assert [e.progress for e in cut] == [pytest.approx(2 / 103)] * 2  # read when cut off by max_turns too
    (none,) = run_episodes(Replies(), lambda: make("test/counter-v0"), ["test-100"], PARAMS, read_progress=True)
    assert none[0].progress is None  # the env cannot say


def test_a_prompt_past_the_models_window_ends_the_episode_named(envs, tiny_sampler, monkeypatch):
    """The real sampler refuses a prompt that cannot fit the model's context window (an error completion naming
    the sizes); the loop ends that episode, truncated, instead of acting on it."""
    monkeypatch.setattr(tiny_sampler.model.config, "max_position_embeddings", 40)
    (episode,) = run_episodes(
        tiny_sampler, lambda: make("test/counter-v0"), ["test-100"], PARAMS, max_turns=3, transcripts=True
    )[0]
    assert episode.truncated and not episode.terminated and episode.num_turns == 1
    info = episode.steps[0]["info"]
    assert info["error"] == "sampler" and "context window of 40 tokens" in info["error_message"]
