"""Generators: bwstates draws every blocks state equally often, canonical forms identify exactly the renamings,
splits are deterministic (byte-identical), disjoint by construction and cached atomically."""

import itertools
import json
import math
import random
from collections import Counter

import pytest

from pivotgym_planning import generators as G
from pivotgym_planning.model import problem_from_text
from pivotgym_planning.stats import domain_stats

#: chi-square critical values at p = 0.001 (scipy.stats.chi2.ppf(0.999, df)) for 13 and 73 states
CHI2_CRITICAL = {3: 32.909, 4: 114.835}


def _all_states(blocks):
    """Every blocks state as a frozenset of towers, enumerated independently of the sampler: each set
    partition of the blocks into towers, each tower in every order."""
    if not blocks:
        return {frozenset()}
    first, rest = blocks[0], blocks[1:]
    out = set()
    for state in _all_states(rest):
        out.add(state | {(first,)})  # a tower of its own
        for tower in state:
            for pos in range(len(tower) + 1):  # inserted anywhere in an existing tower
                out.add((state - {tower}) | {tower[:pos] + (first,) + tower[pos:]})
    return out


def _key(towers):
    return frozenset(tuple(t) for t in towers)


def _chi2(counts, states, draws):
    expected = draws / len(states)
    return sum((counts.get(s, 0) - expected) ** 2 / expected for s in states)


def test_state_counts_follow_the_recurrence_and_lah_numbers():
    lah_sums = [
        sum(math.comb(n - 1, k - 1) * math.factorial(n) // math.factorial(k) for k in range(1, n + 1))
        for n in range(1, 8)
    ]
    assert [G.blocks_state_count(n) for n in range(1, 8)] == lah_sums == [1, 3, 13, 73, 501, 4051, 37633]
    assert [len(_all_states(list("abcde"[:n]))) for n in range(1, 6)] == lah_sums[:5]


@pytest.mark.parametrize("n", [3, 4])
def test_blocks_states_are_uniform(n):
    blocks = list("abcd"[:n])
    states = _all_states(blocks)
    rng = random.Random(12345)
    draws = 100 * len(states)
    counts = Counter(_key(G.sample_blocks_state(blocks, rng)) for _ in range(draws))
    assert set(counts) == states  # every state, and only valid states
    assert _chi2(counts, states, draws) < CHI2_CRITICAL[n]


def test_the_uniformity_check_rejects_a_naive_biased_sampler():
    """A hand-rolled generator (blocks in random order, each onto the table or a random clear block) is
    not uniform, and the same chi-square check catches it: the test above has power."""
    blocks = list("abcd")
    states = _all_states(blocks)
    rng = random.Random(12345)

    def naive():
        towers = []
        for b in rng.sample(blocks, len(blocks)):
            choice = rng.randrange(len(towers) + 1)
            if choice == len(towers):
                towers.append([b])
            else:
                towers[choice].append(b)
        return towers

    draws = 100 * len(states)
    counts = Counter(_key(naive()) for _ in range(draws))
    assert _chi2(counts, states, draws) > CHI2_CRITICAL[4]


def _brute_blocks_orbit(init, goal):
    """The smallest (init facts, goal facts) over every renaming of the blocks: an independent orbit key."""
    blocks = sorted(b for t in init for b in t)
    best = None
    for perm in itertools.permutations(blocks):
        to = dict(zip(blocks, perm))
        ren = [[[to[b] for b in t] for t in s] for s in (init, goal)]
        key = (tuple(G.blocks_facts(ren[0])), tuple(G.blocks_facts(ren[1])))
        best = key if best is None or key < best else best
    return best


def test_blocks_canonical_form_identifies_exactly_the_renamings():
    states = [[list(t) for t in s] for s in _all_states(list("abc"))]
    forms, orbits = {}, {}
    for init, goal in itertools.product(states, states):
        forms.setdefault(G.blocks_canonical(init, goal), set()).add(_brute_blocks_orbit(init, goal))
        orbits.setdefault(_brute_blocks_orbit(init, goal), set()).add(G.blocks_canonical(init, goal))
    assert all(len(v) == 1 for v in forms.values()) and all(len(v) == 1 for v in orbits.values())
    assert len(forms) == len(orbits) > 13


def test_gripper_canonical_form_ignores_ball_and_room_names():
    rng = random.Random(7)
    spec = G.sample_gripper(5, 3, rng)
    rooms = list(spec.rooms)
    shuffled = rooms[:]
    rng.shuffle(shuffled)
    to = dict(zip(rooms, shuffled))
    renamed = G.GripperSpec(
        spec.rooms, to[spec.robot], tuple((f"ball{6 - i}", to[r], to[g]) for i, (_b, r, g) in enumerate(spec.balls))
    )
    assert G.gripper_canonical(renamed) == G.gripper_canonical(spec)
    ball, start, goal = spec.balls[0]
    other = next(r for r in rooms if r != goal)
    moved = G.GripperSpec(spec.rooms, spec.robot, ((ball, start, other),) + spec.balls[1:])
    assert G.gripper_canonical(moved) != G.gripper_canonical(spec)


@pytest.fixture(scope="module")
def small_blocks():
    return G.generate("blocks", seed=3, n_train=30, n_test=15, n_warmup=8)


@pytest.mark.parametrize("name", sorted(G.DOMAINS))
def test_generation_is_deterministic_byte_for_byte(name):
    assert G.to_json(G.generate(name, 5, 12, 6, 3)) == G.to_json(G.generate(name, 5, 12, 6, 3))
    assert G.to_json(G.generate(name, 5, 12, 6, 3)) != G.to_json(G.generate(name, 6, 12, 6, 3))


def test_smaller_splits_are_prefixes_of_larger_ones(small_blocks):
    """Task ids stay valid whatever split sizes an env was built with."""
    smaller = G.generate("blocks", seed=3, n_train=10, n_test=5, n_warmup=2)
    assert smaller["train"] == small_blocks["train"][:10] and smaller["test"] == small_blocks["test"][:5]
    assert smaller["warmup"] == small_blocks["warmup"][:2]


def _towers(facts):
    below = {}
    for f in facts:
        parts = f[1:-1].split()
        below[parts[1]] = parts[2] if parts[0] == "on" else None
    tops = set(below) - {b for b in below.values() if b}
    towers = []
    for top in sorted(tops):
        tower = [top]
        while below[tower[-1]] is not None:
            tower.append(below[tower[-1]])
        towers.append(tower[::-1])
    return towers


def test_splits_are_disjoint_up_to_renaming_and_solved_optimally(small_blocks):
    train, test, warmup = small_blocks["train"], small_blocks["test"], small_blocks["warmup"]
    assert len(train) == 30 and len(test) == 15 and len(warmup) == 8
    # an independent check: orbit keys from the PDDL text by brute force over every renaming
    orbit = {}
    for p in train + test + warmup:
        problem = problem_from_text(p.folder, p.problem_pddl)  # read back by the plugin's PDDL parser
        init = _towers(f for f in problem.init if f.startswith(("(on ", "(ontable ")))
        goal = _towers(problem.goal)
        orbit[p.name] = _brute_blocks_orbit(init, goal)
    assert len(set(orbit.values())) == len(orbit)  # no two problems are renamings of each other
    hashes = {s: {p.canonical for p in small_blocks[s]} for s in G.SPLITS}
    assert not hashes["train"] & hashes["test"] and not hashes["warmup"] & (hashes["train"] | hashes["test"])
    assert all(G.split_of_hash(p.canonical) == s for s in G.SPLITS for p in small_blocks[s])
    other = G.generate("blocks", seed=4, n_train=30, n_test=15, n_warmup=8)  # disjoint across seeds too
    assert not {p.canonical for p in other["train"] + other["warmup"]} & hashes["test"]
    for p in train[:5] + test[:5]:  # the stored plan reaches the goal in optimal_length steps
        problem = problem_from_text(p.folder, p.problem_pddl)
        state = problem.init
        for step in p.plan:
            state = problem.apply(state, problem.parse(step, state))
        assert problem.goal_reached(state) and len(p.plan) == p.optimal_length >= G.DOMAINS["blocks"].min_length


def test_cache_is_written_atomically_per_split_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    G.generated_split.cache_clear()
    try:
        train = G.generated_split("gripper", "train", 9, 8)
        path = G.cache_path("gripper", "train", 9, 8)
        assert path.is_file() and path.is_relative_to(tmp_path)
        assert [p.name for p in path.parent.iterdir()] == [path.name]  # only this split; no temporary file
        assert path.read_text() == G.to_json({"train": train})
        assert train == G.generate("gripper", 9, 8, 4, 2)["train"]  # the same as generated with the others
        data = json.loads(path.read_text())
        data["train"][0]["optimal_length"] = 999  # the cache is what is read back
        path.write_text(json.dumps(data))
        G.generated_split.cache_clear()
        assert G.generated_split("gripper", "train", 9, 8)[0].optimal_length == 999
        path.write_text("{not json")  # a corrupt file is regenerated
        G.generated_split.cache_clear()
        assert G.generated_split("gripper", "train", 9, 8) == train
        assert sorted(G.generated_splits("gripper", 9, 8, 4, 2)) == sorted(G.SPLITS)
        assert len(list(path.parent.iterdir())) == 3
    finally:
        G.generated_split.cache_clear()


def test_unknown_domain_is_a_config_error():
    from pivotgym.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown generated planning domain"):
        G.generate("sokoban")
    with pytest.raises(ConfigError, match="unknown split"):
        G.generated_split("blocks", "validation")


#: SHA-256 of to_json(generate(name, 0, 12, 6, 3)): the same bytes in every process and on every machine (bump
#: GENERATOR_VERSION and these together when the generators change on purpose)
PINNED = {
    "blocks": "40b855630b843578842172e44b5137e30e9c6d8e2510fba0e9a47e38e7ff60e3",
    "gripper": "baa9d851319b91de6492d53cd78725423f15305afde45e27f3f3c64f36241261",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_seed_zero_gives_the_pinned_bytes(name):
    import hashlib

    assert G.GENERATOR_VERSION == 1
    assert hashlib.sha256(G.to_json(G.generate(name, 0, 12, 6, 3)).encode()).hexdigest() == PINNED[name]


def test_split_rule_shares():
    """A third of all problems are test, a sixth warmup, a half train (by hash residue)."""
    counts = Counter(G.split_of_hash(G.canonical_hash(str(i))) for i in range(6000))
    assert abs(counts["test"] - 2000) < 150 and abs(counts["warmup"] - 1000) < 120 and abs(counts["train"] - 3000) < 160


def test_stats_judge_every_legal_action_and_separate_the_domains(tmp_path, monkeypatch):
    """The README's measurement on tiny splits: credited actions are a subset of the legal ones, every
    expert state has one, and gripper has more states with two or more credited actions than blocks."""
    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    G.generated_split.cache_clear()
    try:
        stats = {name: domain_stats(name, 0, 4, 6, 2) for name in ("blocks", "gripper")}
    finally:
        G.generated_split.cache_clear()
    for s in stats.values():
        assert s["problems"] == {"train": 4, "test": 6, "warmup": 2}
        assert s["test_states"] == sum(k * v for k, v in s["optimal_length"]["test"].items())
        assert s["mean_legal_actions"] >= s["mean_credited_actions"] >= 1
        assert 0 < s["random_legal_accuracy"] <= 1 and s["states_with_no_credited_action"] == 0
        assert s["undecided_verdicts"] == 0
    assert stats["gripper"]["share_states_credited_ge2"] > stats["blocks"]["share_states_credited_ge2"]


def test_cache_file_is_readable_by_others_under_a_normal_umask(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("PIVOTGYM_CACHE", str(tmp_path))
    G.generated_split.cache_clear()
    old = os.umask(0o022)
    try:
        G.generated_split("blocks", "test", 2, 2)
    finally:
        os.umask(old)
        G.generated_split.cache_clear()
    assert G.cache_path("blocks", "test", 2, 2).stat().st_mode & 0o777 == 0o644
