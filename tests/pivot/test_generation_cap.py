"""One generation cap for profiling and RL training: each env's own limit, which a setting only shortens."""

from __future__ import annotations

import pytest

from pivotgym.env import DEFAULT_MAX_NEW_TOKENS, generation_cap
from pivotgym.sampling.base import SamplingParams
from pivotgym.train.config import ConfigError, PivotConfig, SFTConfig
from pivotgym.train.pivot import sample_states, state_tokens
from pivotgym.train.states import states_from_trajectories
from pivotgym.types import Completion


class _Env:
    def __init__(self, own: int | None) -> None:
        self.max_new_tokens, self.env_id = own, "x/y-v0"


@pytest.mark.parametrize(
    "own,cap,want", [(64, None, 64), (64, 16, 16), (64, 128, 64), (None, None, DEFAULT_MAX_NEW_TOKENS), (None, 40, 40)]
)
def test_the_rule(own, cap, want):
    assert generation_cap(_Env(own), cap) == want


def test_trainer_defaults_take_the_envs_own_limit():
    assert PivotConfig().max_new_tokens is None and SFTConfig().max_new_tokens is None
    with pytest.raises(ConfigError, match="max_new_tokens must be >= 1"):
        PivotConfig(max_new_tokens=0, pivots="p", trajectories="t").validate()


class _Recorder:
    prompt_seeds = True

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def sample(self, prompts, n=1, params=None, seeds=None):
        self.calls.append((len(prompts), params.max_new_tokens))
        return [[Completion(f"{params.max_new_tokens}") for _ in range(n)] for _ in prompts]


def test_training_samples_each_state_at_its_envs_limit(pivot_registry: object, monkeypatch: pytest.MonkeyPatch):
    from pivotgym_arith.env import ArithChainEnv

    from pivotgym.registry import make

    monkeypatch.setattr(ArithChainEnv, "max_new_tokens", 5)
    trajectories = list(make("arith/chain-v0").expert_trajectories("train", limit=2))
    states = states_from_trajectories(trajectories, encode=lambda messages: [len(messages)])
    assert {s.max_new_tokens for s in states} == {5}
    assert {s.max_new_tokens for s in states_from_trajectories(trajectories, lambda m: [0], cap=3)} == {3}
    assert state_tokens(states[0], None) == 5 and state_tokens(states[0], 2) == 2 and state_tokens(states[0], 99) == 5
    states[0].max_new_tokens = 9  # a state of another env, with a longer limit
    sampler = _Recorder()
    out = sample_states(
        sampler, states, 2, SamplingParams(temperature=1.0, max_new_tokens=128), list(range(len(states)))
    )
    assert sorted(sampler.calls) == [(1, 9), (len(states) - 1, 5)]  # one batched call per cap
    assert [group[0].text for group in out] == ["9"] + ["5"] * (len(states) - 1)  # in state order
    sampler.calls.clear()
    sample_states(sampler, states, 2, SamplingParams(), list(range(len(states))), cap=4)
    assert sampler.calls == [(len(states), 4)]
