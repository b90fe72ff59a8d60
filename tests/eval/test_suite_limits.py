"""Per-env generation limits: a Python env's ``max_new_tokens`` is each turn's cap in suite evaluation, a
suite-wide cap only shortens it, and registration/``make`` keyword arguments set it per instance."""

from __future__ import annotations

import pytest
from core_helpers import CounterEnv

from pivotgym.env import DEFAULT_MAX_NEW_TOKENS
from pivotgym.eval import evaluate_suite, generation_cap
from pivotgym.jsonl import read_jsonl
from pivotgym.registry import EnvSpec, get_registry, make
from pivotgym.types import Completion


class ShortEnv(CounterEnv):
    """CounterEnv whose turns need few tokens (episodes run to the 6-turn limit on the test split)."""

    max_new_tokens = 12


class Recorder:
    """A sampler that answers `add 1` and records each call's max_new_tokens."""

    def __init__(self) -> None:
        self.caps: list[int] = []

    def describe(self) -> dict[str, str]:
        return {"model": "recorder"}

    def sample(self, prompts, n=1, params=None):
        self.caps.append(params.max_new_tokens)
        return [[Completion("add 1", token_ids=[1, 2])] for _ in prompts]


@pytest.fixture()
def envs(monkeypatch):
    """``test/short-v0`` (declares 12), ``test/plain-v0`` (declares nothing), ``test/kw-v0`` (7 through the
    registration's keyword arguments), registered for this test only."""
    registry = get_registry()
    for env_id, factory, kwargs in (
        ("test/short-v0", ShortEnv, {}),
        ("test/plain-v0", CounterEnv, {}),
        ("test/kw-v0", CounterEnv, {"max_new_tokens": 7}),
    ):
        monkeypatch.setitem(registry.envs, env_id, EnvSpec(env_id, factory, "tests", kwargs=kwargs))
    return registry


def _caps(member: str, **kwargs) -> list[int]:
    rec = Recorder()
    evaluate_suite({member: "in_domain"}, rec, None, limit=1, progress=False, **kwargs)
    assert len(rec.caps) == CounterEnv.max_turns  # one call per turn of the one episode
    return sorted(set(rec.caps))


def test_a_python_env_declaring_a_cap_gets_it_on_every_turn(envs):
    assert _caps("test/short-v0@test") == [12]


def test_a_suite_wide_cap_only_shortens_an_env_cap(envs):
    assert _caps("test/short-v0@test", max_new_tokens=64) == [12]  # never lengthened
    assert _caps("test/short-v0@test", max_new_tokens=5) == [5]  # shortened


def test_an_env_declaring_nothing_keeps_the_suite_cap_or_the_default(envs):
    assert _caps("test/plain-v0@test") == [DEFAULT_MAX_NEW_TOKENS] == [256]
    assert _caps("test/plain-v0@test", max_new_tokens=300) == [300]


def test_registration_and_make_keyword_arguments_set_the_cap(envs):
    assert _caps("test/kw-v0@test") == [7]
    assert make("test/kw-v0").max_new_tokens == 7
    assert make("test/kw-v0", max_new_tokens=9).max_new_tokens == 9  # make's keywords override the spec's
    assert make("test/short-v0").max_new_tokens == 12 and CounterEnv.max_new_tokens is None


def test_a_bad_cap_is_a_one_line_error(envs):
    with pytest.raises(ValueError, match=r"^CounterEnv: max_new_tokens must be a positive integer or None, got 0$"):
        make("test/plain-v0", max_new_tokens=0)

    class Broken(CounterEnv):
        max_new_tokens = "64"

    with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
        Broken()


def test_generation_cap_of_a_yaml_env_is_its_answer_length():
    env = make("general/navigate-v0")
    assert generation_cap(env) == env.config.max_new_tokens == 8
    assert generation_cap(env, 64) == 8 and generation_cap(env, 3) == 3


def test_items_record_the_cap_and_a_changed_env_cap_rescores_them(envs, tmp_path, monkeypatch):
    out = tmp_path / "s.json"
    rec = Recorder()
    evaluate_suite({"test/short-v0@test": "in_domain"}, rec, out, limit=2, progress=False)
    assert [row["max_new_tokens"] for row in read_jsonl(str(out) + ".items.jsonl")] == [12, 12]
    rec.caps.clear()
    evaluate_suite({"test/short-v0@test": "in_domain"}, rec, out, limit=2, progress=False)
    assert rec.caps == []  # resumed: nothing generated again
    monkeypatch.setattr(ShortEnv, "max_new_tokens", 8)
    evaluate_suite({"test/short-v0@test": "in_domain"}, rec, out, limit=2, progress=False)
    assert set(rec.caps) == {8}  # items made under another cap are scored again


@pytest.mark.parametrize(
    ("env_id", "cap"),
    [
        ("planning/blocks-v0", 64),
        ("tooluse/bfcl-simple-v0", 256),
        ("tooluse/bfcl-multi-turn-v0", 256),
        ("swe/toolz-v0", 512),
    ],
)
def test_first_party_envs_declare_their_turn_length(env_id, cap):
    spec = get_registry().envs.get(env_id)
    if spec is None:
        pytest.skip(f"{env_id} is not installed")
    from pivotgym.registry import resolve

    assert resolve(spec.factory).max_new_tokens == cap


def test_gymnasium_make_passes_the_cap_through():
    import gymnasium

    if "planning/blocks-v0" not in get_registry().envs:
        pytest.skip("pivotgym-planning is not installed")
    env = gymnasium.make("pivotgym:planning/blocks-v0", max_new_tokens=32, disable_env_checker=True)
    assert env.unwrapped.max_new_tokens == 32
