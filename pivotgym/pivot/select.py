"""Pivot selection: keep the turns whose reference rewards carry a learning signal.

PivotRL's rule keeps a profiled turn when its rewards are mixed (``var > min_var``, default 0) and its mean
is low enough to leave room to improve (``mean < max_mean``, default λ = 0.6). Optional extras: keep only the
``top_n`` hardest pivots (lowest mean first), and cap each env at a quota. Selection also reports, per env,
the share of *uninformative* turns - all samples failed or all passed - which the paper puts at ~71%.

Undecided verifications (timeouts, crashes, verifier errors, a verifier out of budget: a profile row's
``undecided``) never count as rewards: the profiler leaves them out of ``mean`` and ``var``, and a state where
more than ``max_failed_share`` of the draws were undecided is not selected at all (its statistics rest on too
few judgements).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pivotgym.types import PivotSet, TurnProfile

__all__ = ["SelectionRule", "select_pivots", "turn_stats"]


@dataclass
class SelectionRule:
    """Which profiled turns become pivots. Stored with the pivot set so a selection can be reproduced."""

    min_var: float = 0.0
    max_mean: float = 0.6
    min_mean: float | None = None
    #: keep at most this many pivots overall, hardest (lowest mean) first
    top_n: int | None = None
    #: at most this many pivots per env (``{"*": n}`` applies to every env without its own entry)
    per_env: dict[str, int] = field(default_factory=dict)
    #: a state where more than this share of the draws failed verification is never a pivot
    max_failed_share: float = 0.5

    def admits(self, profile: TurnProfile) -> bool:
        """Whether ``profile`` is a pivot under this rule (judged on its valid rewards only)."""
        failed = len(profile.undecided)
        if failed and failed / (failed + len(profile.rewards)) > self.max_failed_share:
            return False
        if not profile.var > self.min_var:
            return False
        if not profile.mean < self.max_mean:
            return False
        return self.min_mean is None or profile.mean >= self.min_mean

    def quota(self, env_id: str) -> int | None:
        return self.per_env.get(env_id, self.per_env.get("*"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SelectionRule:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def _hardness(profile: TurnProfile) -> tuple[float, float, str]:
    """Sort key: lowest mean first, then the most varied, then the key (a deterministic tie-break)."""
    return (profile.mean, -profile.var, profile.key)


def turn_stats(profiles: Iterable[TurnProfile], rule: SelectionRule | None = None) -> dict[str, dict[str, Any]]:
    """Per env (and ``"all"``): turns, all-fail, all-pass, other constant, informative, share uninformative,
    and how many pass ``rule`` before top-N/quotas."""
    rule = rule or SelectionRule()
    table: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "turns": 0,
            "all_fail": 0,
            "all_pass": 0,
            "constant_other": 0,
            "informative": 0,
            "eligible": 0,
            "failed_verifications": 0,
        }
    )
    for p in profiles:
        for env in (p.env_id, "all"):
            row = table[env]
            row["turns"] += 1
            if p.var > 0:
                row["informative"] += 1
            elif p.mean <= 0:
                row["all_fail"] += 1
            elif p.mean >= 1:
                row["all_pass"] += 1
            else:
                row["constant_other"] += 1
            row["eligible"] += int(rule.admits(p))
            row["failed_verifications"] += len(p.undecided)
    for row in table.values():
        uninformative = row["turns"] - row["informative"]
        row["uninformative"] = uninformative
        row["share_uninformative"] = round(uninformative / row["turns"], 4) if row["turns"] else 0.0
    return dict(sorted(table.items(), key=lambda kv: (kv[0] == "all", kv[0])))


def select_pivots(profiles: Iterable[TurnProfile], rule: SelectionRule | None = None) -> PivotSet:
    """Apply ``rule``; pivots keep the input order unless ``top_n`` or a quota asks for the hardest ones."""
    rule = rule or SelectionRule()
    profiles = list(profiles)
    eligible = [p for p in profiles if rule.admits(p)]
    if rule.per_env:
        kept: list[TurnProfile] = []
        by_env: dict[str, list[TurnProfile]] = defaultdict(list)
        for p in eligible:
            by_env[p.env_id].append(p)
        chosen: set[str] = set()
        for env_id, group in by_env.items():
            quota = rule.quota(env_id)
            ranked = sorted(group, key=_hardness)
            chosen.update(p.key for p in (ranked if quota is None else ranked[:quota]))
        kept = [p for p in eligible if p.key in chosen]
        eligible = kept
    if rule.top_n is not None:
        chosen = {p.key for p in sorted(eligible, key=_hardness)[: rule.top_n]}
        eligible = [p for p in eligible if p.key in chosen]
    stats = turn_stats(profiles, rule)
    pivots_per_env: dict[str, int] = defaultdict(int)
    for p in eligible:
        pivots_per_env[p.env_id] += 1
        pivots_per_env["all"] += 1
    for env, row in stats.items():
        row["pivots"] = pivots_per_env.get(env, 0)
        row["share_pivots"] = round(row["pivots"] / row["turns"], 4) if row["turns"] else 0.0
    return PivotSet(rule=rule.to_dict(), pivots=eligible, stats={"per_env": stats})
