"""Regression: the expert-calls-alone verifier against BFCL's answer lists, on a fixed sample of pairs.

The pairs (:mod:`pivotgym_tooluse.bfcl_pairs`) are labelled by BFCL's answer lists, never by a verifier; the
full measurement is ``benchmarks/tooluse_bfcl_pairs.py``. Here a fixed, seeded sample (every 3rd item of the
unshipped ``sql`` and ``exec`` sources, every 15th of the shipped categories) must keep zero false positives
and at least 98 % agreement on the subset decidable from the expert's call alone.
"""

from __future__ import annotations

from collections import Counter

import pytest
from tooluse_helpers import single_env

from pivotgym.eval.stats import wilson
from pivotgym_tooluse import bfcl
from pivotgym_tooluse.bfcl_pairs import LABELS, bfcl_norm, context_for, generate, listed
from pivotgym_tooluse.verifier import ToolCallExactVerifier, ToolCallVerifier, reason_code

SAMPLE = {"sql": 3, "exec": 3, "shipped": 15}


@pytest.fixture(scope="module")
def env():
    return single_env()


@pytest.fixture(scope="module")
def sample():
    return {source: generate(source, every=every, seed=0) for source, every in SAMPLE.items()}


def _judge(verifier, pairs, env):
    return [verifier.verify(context_for(p, env_factory=lambda: env), p.text) for p in pairs]


@pytest.mark.parametrize("source", list(SAMPLE))
def test_no_false_positive_and_98_percent_on_the_decidable_subset(env, sample, source):
    pairs = [p for p in sample[source] if p.decidable]
    assert len(pairs) >= 150 and {p.label for p in pairs} == {True, False}
    verdicts = _judge(ToolCallVerifier(), pairs, env)
    fp = [(p.item, p.transform, p.text[:120]) for p, v in zip(pairs, verdicts) if v.reward == 1.0 and not p.label]
    fn = [(p.item, p.transform, v.reason[:120]) for p, v in zip(pairs, verdicts) if v.reward != 1.0 and p.label]
    agree = len(pairs) - len(fp) - len(fn)
    low, high = wilson(agree, len(pairs))
    print(f"\n{source}: {agree}/{len(pairs)} [{low:.4f}, {high:.4f}]", Counter(t for _, t, _ in fn))
    assert not fp, fp[:5]
    assert agree / len(pairs) >= 0.98, fn[:10]
    exact = _judge(ToolCallExactVerifier(), pairs, env)
    assert sum((v.reward == 1.0) == p.label for p, v in zip(pairs, exact)) < agree  # the pairs discriminate


def test_synonyms_are_reported_as_not_decidable(env, sample):
    synonyms = [p for p in sample["shipped"] if p.transform == "alt_value" and p.why.startswith("not decidable")]
    codes = Counter(reason_code(v) for v in _judge(ToolCallVerifier(), synonyms, env))
    assert codes["text_not_decidable"] >= 10, codes
    assert codes["equivalent:structural"] == 0, codes  # the ceiling: reported, never guessed


def test_labels_come_from_bfcls_answer_lists(sample):
    answers = {e["id"]: e["answers"] for c in ("simple_python", "multiple") for e in bfcl.load_category(c)}
    checked = 0
    for pair in sample["shipped"]:
        assert pair.label is LABELS[pair.transform] or pair.transform == "explicit_default"
        if pair.item not in answers or not pair.param or pair.transform in ("omit_optional", "explicit_null"):
            continue
        accepted = next(iter(answers[pair.item][0].values()))[pair.param]
        value = pair.candidate[0].arguments.get(pair.param)
        if pair.transform in ("alt_value", "explicit_default") and pair.label:
            assert listed(value, accepted)
        elif pair.transform in ("case_variant", "pad_whitespace"):
            assert listed(value, accepted)  # BFCL's checker folds case and drops spaces
        elif pair.transform in ("perturb_number", "other_string", "flip_bool"):
            assert not listed(value, accepted)
        checked += 1
    assert checked >= 100
    assert bfcl_norm("Los Angeles") == bfcl_norm("los-angeles") and bfcl_norm(2) == bfcl_norm(2.0)


def test_unshipped_sources_are_not_shipped_categories(sample):
    shipped = {e["id"] for c in bfcl.SINGLE_TURN_CATEGORIES + bfcl.MULTI_TURN_CATEGORIES for e in bfcl.load_category(c)}
    for source in ("sql", "exec"):
        items = {p.item for p in sample[source]}
        assert items and items.isdisjoint(shipped)
