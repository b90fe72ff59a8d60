"""``compare`` refuses results that measured different things (suite, metric, items) unless told
``--allow-mismatch``, and shows each difference's 95% interval: paired over items when both results record
per-item scores, else unpaired from the two scores' intervals. The command is run through the installed
``pivotgym`` console script, so its exit status is what CI sees."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pivotgym.errors import ResultMismatch
from pivotgym.eval import ci95, compare, format_comparison, mismatches, paired_interval, summarize, unpaired_interval


def _console_script() -> str:
    beside = Path(sys.executable).parent / "pivotgym"
    found = str(beside) if beside.exists() else shutil.which("pivotgym")
    assert found, "the pivotgym console script is not installed"
    return found


def _pivotgym(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_console_script(), *args], capture_output=True, text=True, timeout=120)


def _result(model: str, members: dict[str, tuple[str, dict[str, float]]], suite: str = "s") -> dict:
    """A suite result as ``pivotgym eval`` writes it: per member its metric and per-item scores."""
    scores = {key: summarize(list(items.values()), metric, list(items)) for key, (metric, items) in members.items()}
    return {
        "suite": suite,
        "model": model,
        "scores": scores,
        "role": {key: "in_domain" if key.startswith("a/") else "ood" for key in members},
    }


def _items(values: list[float], prefix: str = "t") -> dict[str, float]:
    return {f"{prefix}{i}": v for i, v in enumerate(values)}


BASE = _result(
    "base",
    {"a/x-v0@test": ("success", _items([0, 0, 1, 0, 1, 0, 0, 1, 0, 0])), "g/p-v0": ("accuracy", _items([1, 0, 1, 0]))},
)
TRAINED = _result(
    "rl",
    {"a/x-v0@test": ("success", _items([1, 0, 1, 1, 1, 0, 1, 1, 0, 1])), "g/p-v0": ("accuracy", _items([1, 0, 1, 1]))},
)


def _write(tmp_path: Path, name: str, data: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_alike_results_compare_with_a_paired_interval_per_member():
    comp = compare(BASE, TRAINED)
    row = next(r for r in comp["rows"] if r["env"] == "a/x-v0@test")
    assert row["paired"] and math.isclose(row["delta"], 0.4)
    diffs = [1, 0, 0, 1, 0, 0, 1, 0, 0, 1]  # per-item trained - base
    half = 1.959963984540054 * (sum((d - 0.4) ** 2 for d in diffs) / 9) ** 0.5 / 10**0.5
    assert row["delta_ci95"] == pytest.approx([0.4 - half, 0.4 + half])
    assert comp["mismatches"] == [] and comp["averages"]["in_domain"]["paired"]
    assert comp["averages"]["in_domain"]["delta_ci95"] == pytest.approx(row["delta_ci95"])  # one member: same


def test_without_per_item_scores_the_interval_is_unpaired_and_said_so():
    def strip(result: dict) -> dict:
        return {
            **result,
            "scores": {k: {f: v for f, v in s.items() if f != "per_item"} for k, s in result["scores"].items()},
        }

    comp = compare(strip(BASE), strip(TRAINED))
    row = next(r for r in comp["rows"] if r["env"] == "a/x-v0@test")
    assert not row["paired"]
    b, t = BASE["scores"]["a/x-v0@test"], TRAINED["scores"]["a/x-v0@test"]
    assert row["delta_ci95"] == pytest.approx(unpaired_interval(b["value"], b["ci95"], t["value"], t["ci95"]))
    # wider than the paired one: the items' own difficulty is not cancelled out
    paired = paired_interval(b["per_item"], t["per_item"])
    assert row["delta_ci95"][1] - row["delta_ci95"][0] > paired[1] - paired[0]
    table = format_comparison(comp)
    rows = table.splitlines()[2:-1]  # below the header and its rule, above the footnote
    assert len(rows) == 4 and all("  unpaired  " in line for line in rows)


def test_unpaired_interval_of_two_equal_scores_is_centred_on_zero():
    ci = ci95([1.0] * 5 + [0.0] * 5)
    low, high = unpaired_interval(0.5, ci, 0.5, ci)
    assert math.isclose(low, -high) and high == pytest.approx(math.hypot(ci[1] - 0.5, 0.5 - ci[0]))


@pytest.mark.parametrize(
    ("trained", "expected"),
    [
        (
            _result(
                "rl", {"a/x-v0@test": ("turn_accuracy", _items([1, 0, 1])), "g/p-v0": ("accuracy", _items([1] * 4))}
            ),
            "member a/x-v0@test: metric 'success' in base, 'turn_accuracy' in trained",
        ),
        (
            _result("rl", {"a/x-v0@test": ("success", _items([1, 0, 1])), "g/p-v0": ("accuracy", _items([1] * 4))}),
            "member a/x-v0@test: different items (base 10, trained 3, 3 in both)",
        ),
        (
            _result("rl", {"a/x-v0@test": ("success", _items([1] * 10, "u")), "g/p-v0": ("accuracy", _items([1] * 4))}),
            "member a/x-v0@test: different items (base 10, trained 10, 0 in both)",
        ),
        (
            _result(
                "rl",
                {"a/x-v0@test": ("success", _items([1] * 10)), "g/p-v0": ("accuracy", _items([1] * 4))},
                suite="other",
            ),
            "suite: base is 's', trained is 'other'",
        ),
    ],
)
def test_unlike_results_are_refused_naming_the_member_and_what_differs(trained, expected):
    assert mismatches(BASE, trained) == [expected]
    with pytest.raises(
        ResultMismatch, match="^results not comparable: " + expected.replace("(", r"\(").replace(")", r"\)") + "$"
    ):
        compare(BASE, trained)
    comp = compare(BASE, trained, allow_mismatch=True)
    assert comp["mismatches"] == [expected] and f"warning: {expected}" in format_comparison(comp)


def test_without_item_ids_a_different_n_is_a_mismatch():
    base = {"suite": "s", "scores": {"g/p-v0": {"metric": "acc", "value": 0.5, "n": 10, "ci95": [0.2, 0.8]}}}
    trained = {"suite": "s", "scores": {"g/p-v0": {"metric": "acc", "value": 0.6, "n": 3, "ci95": [0.2, 0.9]}}}
    assert mismatches(base, trained) == ["member g/p-v0: n is 10 in base, 3 in trained"]


def test_cli_table_shows_each_delta_with_its_interval(tmp_path):
    done = _pivotgym("compare", _write(tmp_path, "b.json", BASE), _write(tmp_path, "t.json", TRAINED))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "env",
        "role",
        "metric",
        "base",
        "trained",
        "delta",
        "delta",
        "95%",
        "CI",
        "interval",
        "n",
    ]
    row = next(line for line in lines if line.startswith("a/x-v0@test"))
    low, high = compare(BASE, TRAINED)["rows"][0]["delta_ci95"]
    assert row.split()[5:] == ["+40.0", f"[{100 * low:+.1f},", f"{100 * high:+.1f}]", "paired", "10"]
    assert any(line.startswith("average ood") and "paired" in line for line in lines)


@pytest.mark.slow  # ≥ 5 s on 2 cores (make test-fast leaves it out)
def test_cli_refuses_a_mismatch_with_one_line_and_exit_1_unless_allowed(tmp_path):
    """The issue's case: a 10-item episode-success member against a 3-item turn-accuracy one."""
    other = _result(
        "rl", {"a/x-v0@test": ("turn_accuracy", _items([1, 0, 1])), "g/p-v0": ("accuracy", _items([1, 0, 1, 1]))}
    )
    base, trained = _write(tmp_path, "b.json", BASE), _write(tmp_path, "t.json", other)
    done = _pivotgym("compare", base, trained)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert (
        line.startswith(
            "error: results not comparable: member a/x-v0@test: metric 'success' in base, 'turn_accuracy' in trained"
        )
        and "--allow-mismatch" in line
    )
    done = _pivotgym("compare", base, trained, "--json")
    assert done.returncode == 1 and done.stdout == ""
    allowed = _pivotgym("compare", base, trained, "--allow-mismatch")
    assert allowed.returncode == 0, allowed.stderr
    assert "warning: member a/x-v0@test: metric 'success' in base, 'turn_accuracy' in trained" in allowed.stdout
    data = json.loads(_pivotgym("compare", base, trained, "--allow-mismatch", "--json").stdout)
    assert data["mismatches"] and data["rows"][0]["paired"] is False


def test_cli_reports_a_file_that_is_not_a_result(tmp_path):
    done = _pivotgym("compare", _write(tmp_path, "bad.json", {}), _write(tmp_path, "t.json", TRAINED))
    assert done.returncode == 1 and "not a suite result" in done.stderr


def test_wilson_interval_matches_ci95_of_outcomes_and_keeps_exact_ends():
    from pivotgym.eval import wilson

    assert wilson(7, 20) == pytest.approx(ci95([1.0] * 7 + [0.0] * 13))
    low, high = wilson(7, 20)
    assert 0.15 < low < 0.35 < high < 0.6  # around the share, asymmetric near 0
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
    assert wilson(0, 0) == [0.0, 0.0]
