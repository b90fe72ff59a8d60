"""Stage fingerprints: what each stage's results depend on, recorded next to them, so that a rerun under a
changed config stops instead of mixing results of two configs.

A stage's inputs are a flat mapping of dotted names to values: its slice of the config (``pivot.steps``,
``eval.limit``, ...; the trainer sections filled in with the trainer defaults, so writing a default out changes
nothing), the fingerprints of the stages it uses (``upstream.sft``), the verifiers that judge it
(``verifiers.<name>``: version) and the model. The fingerprint is a hash of those inputs.
``stages/<stage>-s<seed>.json`` keeps both, written when the stage starts (so a stage interrupted halfway is
tied to its inputs too) and marked ``done`` when it ends. Code and library versions are provenance
(``config.json``), not inputs: a code change does not block a rerun.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pivotgym.errors import StageChanged
from pivotgym.experiment.accounting import matched_sft_steps
from pivotgym.experiment.config import TRAINER_SECTIONS, ExperimentConfig, _trainer_class
from pivotgym.experiment.layout import STAGES, RunLayout, downstream, upstream

__all__ = [
    "StageRecord",
    "changed_fields",
    "recorded_changes",
    "stage_changed",
    "fingerprint",
    "stage_inputs",
    "verifier_versions",
]

#: trainer fields that do not change results (display and logging)
NOT_INPUTS = ("progress", "report_to")
#: inputs added after runs were recorded, at the value that does what those runs did: at that value they are
#: left out, so the runs keep their fingerprints (any other value is an input like every other)
ADDED_AT_DEFAULT: dict[str, Any] = {
    "sampler_options": {},
    "eval.likelihood": False,
    "e2e.start": "reset",
    "verifier": "functional",
    "judge": {},
    "curve.points": None,
}
#: the config fields every evaluating stage depends on (what the suite and the curve measure, and how)
EVALUATION = (
    "env",
    "ood",
    "suite",
    "sampler",
    "sampler_options",
    "eval",
    "curve.metric",
    "curve.tasks",
    "curve.max_turns",
)
#: trainer fields the experiment copies from its top-level fields (inputs there, not in each trainer section)
FROM_TOP_LEVEL = ("sampler", "sampler_options")
#: per stage: the config fields (a section name means every field of it) its results depend on
SLICES: dict[str, tuple[str, ...]] = {
    "base": ("model", *EVALUATION),
    "expert": ("env", "train_tasks", "warmup_tasks"),
    "warmup": ("model", "rl_init", "warmup", "warmup_tasks", *EVALUATION),
    "sft": ("model", "sft", "rl_init", "curve.points", *EVALUATION),
    "profile": ("model", "rl_init", "env", "sampler", "sampler_options", "profile", "select", "verifier", "judge"),
    "pivot": ("model", "rl_init", "pivot", "curve.every", "curve.points", "verifier", "judge", *EVALUATION),
    "e2e": ("model", "rl_init", "e2e", "curve.every", "curve.points", *EVALUATION),
    "sft-more": ("model", "sft", "matched_sft", *EVALUATION),
    "ablation": ("model", "rl_init", "ablations", "pivot", "profile", "select", "verifier", "judge", *EVALUATION),
}


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = list(value) if isinstance(value, tuple) else value


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def config_values(config: ExperimentConfig) -> dict[str, Any]:
    """Every config field as a dotted name -> value, trainer sections completed with the trainer defaults."""
    data = config.to_dict()
    data.pop("path", None)
    if config.rl_init != "warmup":  # no warm-up model: runs recorded before it existed keep their prints
        data.pop("warmup", None)
        data.pop("warmup_tasks", None)
    skip = (*NOT_INPUTS, *FROM_TOP_LEVEL)
    for name in TRAINER_SECTIONS:
        if name not in data:
            continue
        defaults = {f.name: _default(f) for f in dataclasses.fields(_trainer_class(name)) if f.name not in skip}
        data[name] = {**defaults, **{k: v for k, v in config.__dict__[name].items() if k not in NOT_INPUTS}}
    flat: dict[str, Any] = {}
    _flatten(json.loads(json.dumps(data, default=str)), "", flat)
    return {k: v for k, v in flat.items() if k not in ADDED_AT_DEFAULT or v != ADDED_AT_DEFAULT[k]}


def verifier_versions(env_id: str, reward: str = "functional") -> dict[str, str]:
    """``{name: version}`` of the env's functional and exact-match verifiers and of the run's ``reward``
    verifier (the config's ``verifier``), ``unknown`` when one cannot be built."""
    from pivotgym.registry import get_registry

    registry = get_registry()
    out = {}
    for kind in dict.fromkeys(("functional", "exact", reward)):
        name = registry.verifier_name_for(env_id, kind)
        try:
            out[name] = str(registry.make_verifier(name).version)
        except Exception:
            out[name] = "unknown"
    return out


def stage_inputs(
    config: ExperimentConfig,
    stage: str,
    seed: int | None,
    upstream_prints: Mapping[str, str],
    verifiers: Mapping[str, str],
) -> dict[str, Any]:
    """The inputs of one stage run (dotted name -> value); ``upstream_prints`` maps each upstream stage to its
    fingerprint (same seed)."""
    values = config_values(config)
    inputs = {k: v for k, v in values.items() if any(k == s or k.startswith(s + ".") for s in SLICES[stage])}
    if stage == "sft-more":
        inputs["sft-more.steps"] = matched_sft_steps(config)
    if stage == "sft" and config.curve.every != 1:  # SFT's curve follows it too; runs before that kept 1
        inputs["curve.every"] = config.curve.every
    if stage == "ablation" and {"e2e_progress", "e2e_expert_states"} & set(config.ablations):  # E2E runs among them
        inputs.update({k: v for k, v in values.items() if k.startswith("e2e.")})
    if seed is not None:
        inputs["seed"] = seed
    if stage not in ("expert",):
        inputs.update({f"verifiers.{name}": version for name, version in sorted(verifiers.items())})
    inputs.update({f"upstream.{name}": upstream_prints[name] for name in upstream(stage, config.rl_init)})
    return inputs


def fingerprint(inputs: Mapping[str, Any]) -> str:
    """A short hash of ``inputs``."""
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclasses.dataclass
class StageRecord:
    """What ``stages/<stage>[-s<seed>].json`` holds."""

    stage: str
    seed: int | None
    fingerprint: str
    inputs: dict[str, Any]
    #: ``running`` (written when the stage starts) or ``done``
    status: str = "running"
    #: the code that ran the stage (:func:`~pivotgym.experiment.provenance.code_revision`): a resumed run's
    #: stages can come from different revisions, which the report lists
    code: dict[str, Any] | None = None

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True, default=str), encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> StageRecord | None:
        if not path.exists():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**{f.name: data.get(f.name) for f in dataclasses.fields(cls)})


def changed_fields(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """``name: old -> new`` for every input that differs (``(unset)`` for one that is new or gone)."""

    def show(mapping: Mapping[str, Any], key: str) -> str:
        return json.dumps(mapping[key], default=str) if key in mapping else "(unset)"

    keys = sorted(set(old) | set(new), key=lambda k: (k.startswith("upstream."), k))
    return [f"{k}: {show(old, k)} -> {show(new, k)}" for k in keys if old.get(k, ...) != new.get(k, ...)]


def recorded_changes(layout: RunLayout, stage: str, seed: int | None, inputs: Mapping[str, Any]) -> list[str]:
    """The inputs of ``stage`` (``seed``) that differ from those it already ran (or started) under, as
    :func:`changed_fields` lines; empty when it never ran or its fingerprint matches."""
    record = StageRecord.read(layout.record(stage, seed))
    if record is None or record.fingerprint == fingerprint(inputs):
        return []
    return changed_fields(record.inputs or {}, inputs)


def stage_changed(
    layout: RunLayout,
    changed: Mapping[tuple[str, int | None], list[str]],
    rl_init: str,
    config_path: Path | None,
) -> StageChanged:
    """The error for finished stages whose inputs changed (in run order): it names the first one, its seed and
    its own changed fields, lists the others, and gives the ``--rerun`` options that recompute them all (the
    changed stages no other changed stage is upstream of)."""
    (stage, seed), changes = next(iter(changed.items()))
    own = [c for c in changes if not c.startswith("upstream.")] or changes
    which = f"stage {stage}" + (f" (seed {seed})" if seed is not None else "")
    names = list(dict.fromkeys(name for name, _ in changed))
    roots = [n for n in names if not any(n in downstream([m], rl_init) for m in names if m != n)]
    others = [f"{name}" + (f" (seed {s})" if s is not None else "") for name, s in list(changed)[1:]]
    rerun = " ".join(f"--rerun {name}" for name in roots)
    config = str(config_path) if config_path else "CONFIG"
    return StageChanged(
        f"{which} already ran in {layout.root} under other inputs: {'; '.join(own)}"
        + (f" (changed too: {', '.join(others)})" if others else "")
        + f". Recompute with `pivotgym experiment {config} {rerun}` (it reruns the stages downstream too), "
        "or start a new run folder with `--out DIR`",
        hint=f"{rerun} recomputes {', '.join(roots)} and every stage downstream",
    )


def stage_plan(seeds: Iterable[int]) -> list[tuple[str, int | None]]:
    """Every (stage, seed) run of an experiment in run order (the report excluded)."""
    seeds = list(seeds)
    plan: list[tuple[str, int | None]] = [("base", None), ("expert", None)]
    plan += [("warmup", s) for s in seeds]
    plan += [("sft", s) for s in seeds]
    for s in seeds:
        plan += [("profile", s), ("pivot", s), ("e2e", s), ("sft-more", s)]
    plan += [("ablation", s) for s in seeds]
    assert {stage for stage, _ in plan} == set(STAGES) - {"report"}
    return plan
