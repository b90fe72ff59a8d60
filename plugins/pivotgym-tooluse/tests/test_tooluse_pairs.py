"""Agreement of the functional verifier with generated equivalence labels, judging from expert calls alone.

The pairs (:mod:`pivotgym_tooluse.pairs`) are made from BFCL items the project does not ship as tasks, and
labelled by the transformation applied, never by the verifier. Every context is built through the public
API (:meth:`VerifyContext.from_turn` with the functions, the question and the expert's calls only), as an
imported NeMo-Gym row or a user's own trajectory would be.
"""

from __future__ import annotations

from collections import Counter

import pytest
from tooluse_helpers import single_env

from pivotgym_tooluse import bfcl
from pivotgym_tooluse.pairs import LABELS, SHIPPED_CATEGORIES, context_for, generate, wilson
from pivotgym_tooluse.verifier import ToolCallExactVerifier, ToolCallVerifier


@pytest.fixture(scope="module")
def env():
    return single_env()


def _agreement(verifier, pairs, env):
    agree, wrong = 0, []
    for pair in pairs:
        verdict = verifier.verify(context_for(pair, env_factory=lambda: env), pair.candidate)
        if (verdict.reward == 1.0) == pair.label:
            agree += 1
        else:
            wrong.append((pair.transform, pair.item, pair.candidate[:120], verdict.reason[:120]))
    return agree, wrong


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
@pytest.mark.parametrize("source", ["unshipped", "shipped"])
def test_functional_verifier_agrees_with_transformation_labels(env, source):
    pairs = generate(source=source)
    kinds = Counter(p.transform for p in pairs)
    assert len(pairs) >= 200 and set(kinds) == set(LABELS), set(LABELS) - set(kinds)
    assert {p.label for p in pairs} == {True, False}
    agree, wrong = _agreement(ToolCallVerifier(), pairs, env)
    low, high = wilson(agree, len(pairs))
    print(
        f"\n{source}: {agree}/{len(pairs)} = {agree / len(pairs):.4f} (95% Wilson [{low:.4f}, {high:.4f}])",
        Counter(w[0] for w in wrong),
        wrong[:5],
    )
    assert agree / len(pairs) >= 0.98, wrong[:10]
    exact, _ = _agreement(ToolCallExactVerifier(), pairs, env)
    assert exact < agree  # the pairs discriminate: exact match misses the equivalent forms


def test_main_pairs_come_from_items_the_project_does_not_ship():
    shipped = {
        e["id"]
        for category in bfcl.SINGLE_TURN_CATEGORIES + bfcl.MULTI_TURN_CATEGORIES
        for e in bfcl.load_category(category)
    }
    items = {p.item.split(":")[0] for p in generate()}
    assert items and items.isdisjoint(shipped)
    assert all(category in bfcl.SINGLE_TURN_CATEGORIES for category in SHIPPED_CATEGORIES)


def test_labels_come_from_the_transformation_not_the_verifier():
    for pair in generate()[:300]:
        assert pair.label is LABELS[pair.transform]


def test_wilson_interval():
    low, high = wilson(98, 100)
    assert 0.92 < low < 0.98 < high < 1.0
    assert wilson(0, 0) == (0.0, 1.0)
