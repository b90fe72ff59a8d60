"""The experiment config: one YAML file parsed whole into checked dataclasses before anything runs.

:func:`load_experiment` reads the file with :func:`pivotgym.config.read_yaml` and builds
:class:`ExperimentConfig` with :func:`pivotgym.config.build`, so an unknown key anywhere (``select: {max_maen:
0.5}``, ``eval: {limt: 3}``, ``profile: {kk: 4}``), a value of the wrong type or a value outside its allowed
set fails with ``FILE:LINE: dotted.key: ...`` and a did-you-mean before a model is loaded or a run folder is
created. The trainer sections (``sft``, ``pivot``, ``e2e``) override some fields of the trainer configs the
stages build later, so they are checked as partial mappings of :class:`~pivotgym.train.config.SFTConfig`,
:class:`~pivotgym.train.config.PivotConfig` and :class:`~pivotgym.train.config.E2EConfig`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivotgym.config import (
    INTERNAL,
    Source,
    build,
    check_field_choices,
    check_section,
    choices,
    did_you_mean,
    read_yaml,
)
from pivotgym.errors import ConfigError, RegistryError
from pivotgym.execution import EXECUTORS
from pivotgym.experiment.layout import METHOD_LABELS
from pivotgym.pivot.adaptive import AdaptiveK
from pivotgym.pivot.profile import ProfileConfig, profile_config
from pivotgym.pivot.select import SelectionRule

__all__ = [
    "ABLATIONS",
    "COMPARISON_SETS",
    "CURVE_METRICS",
    "CurveSection",
    "EvalSection",
    "ExperimentConfig",
    "ExperimentError",
    "ProfileSection",
    "RL_INITS",
    "TRAINER_SECTIONS",
    "check_ids",
    "load_experiment",
    "parse_comparison",
]

#: the experiment's errors are config errors (one error type for every config file)
ExperimentError = ConfigError

#: the in-domain learning curves' y axis (``curve.metric``): ``episodes`` = success of one greedy episode per
#: test task; ``turns`` = turn accuracy, the share of held-out expert states (every turn of the expert
#: trajectories of the test tasks) where the greedy action passes the functional verifier, per task
CURVE_METRICS = ("episodes", "turns")
#: the method tags a comparison can name
METHOD_TAGS = tuple(METHOD_LABELS)
#: the extra PivotRL runs of the ablation stage
ABLATIONS = ("random_turns", "exact_reward", "placebo", "e2e_progress", "e2e_expert_states")
#: the item sets a comparison (``primary``) can be on: the in-domain and OOD members, or the probability of a
#: credited action at the held-out states (``eval.likelihood``)
COMPARISON_SETS = ("in_domain", "ood", "p_credited")
#: where PivotRL and E2E RL start (and, for ``warmup``, SFT and continued SFT too)
RL_INITS = ("base", "sft", "warmup")


@dataclass
class EvalSection:
    """Suite evaluation options (``eval:``)."""

    #: items per suite member (null: every item)
    limit: int | None = None
    #: a suite-wide cap on new tokens per turn; an env's own limit is never lengthened (null: the env's own)
    max_new_tokens: int | None = None
    #: prompts per sampler call
    batch_size: int = 8
    #: with `curve.metric: turns`, also run the greedy episodes and report their success beside turn accuracy
    episodes: bool = True
    #: with `curve.metric: turns`, also score every legal action's likelihood at the held-out states (envs with
    #: `legal_actions()`, hf sampler): the exact probability of a credited action and of a legal one per model,
    #: lower-variance companions of greedy turn accuracy (members `<env>@test:p_credited`, `:p_legal`); the scoring
    #: pass also decodes the greedy answers that turn accuracy then judges, so turn accuracy is not generated a
    #: second time (docs/floors.md)
    likelihood: bool = False


@dataclass
class CurveSection:
    """The in-domain learning curves (``curve:``)."""

    #: `episodes` (success of one greedy episode per test task) or `turns` (turn accuracy on the held-out
    #: expert states of the test tasks)
    metric: str = field(default="episodes", metadata=choices(CURVE_METRICS))
    #: a curve point every N training steps (and after the last)
    every: int = 1
    #: instead of `every`: a curve point at N evenly spaced steps of each method's run, the last one included,
    #: so a method of few steps gets as many points as one of many (null: every `every` steps)
    points: int | None = None
    #: the first N test tasks (null: all)
    tasks: int | None = None
    #: turn cap of the greedy episodes (null: the env's own)
    max_turns: int | None = None


def curve_steps(curve: CurveSection, steps: int) -> set[int]:
    """The training steps (1..``steps``) after which a run of ``steps`` steps scores a curve point: every
    ``curve.every`` steps, or ``curve.points`` steps spread evenly; the last step always."""
    if curve.points is None:
        every = max(1, curve.every)
        return {s for s in range(1, steps + 1) if s % every == 0} | {steps}
    return {max(1, round(i * steps / curve.points)) for i in range(1, curve.points + 1)} | {steps}


@dataclass
class ProfileSection:
    """Profiler options (``profile:``): the fields of :class:`~pivotgym.pivot.profile.ProfileConfig` an experiment
    may set, with its sampling written flat (``temperature``, ``top_p``, ``max_new_tokens``) as the command line
    writes it. Defaults are ProfileConfig's own; :meth:`to_config` is the one way from here to there."""

    #: samples per expert turn
    k: int = ProfileConfig.k
    #: sampling temperature of the frozen reference
    temperature: float = 1.0
    #: nucleus sampling threshold
    top_p: float = 1.0
    #: new tokens per sample; only shortens the env's own limit (null: the env's own limit)
    max_new_tokens: int | None = None
    #: profiling seed (null: the training seed)
    seed: int | None = None
    #: samples per sampler call for fixed K (null: all K at once)
    block: int | None = ProfileConfig.block
    #: adaptive K (`max_mean`, `min_pass_rate`, `delta`, `block`, `settle_mean`, `min_unanimous`; null: fixed K)
    adaptive: AdaptiveK | None = ProfileConfig.adaptive
    #: seconds one verification may take before it counts as failed
    timeout: float | None = ProfileConfig.timeout
    #: states profiled together per round
    chunk: int = ProfileConfig.chunk
    #: threshold of the progress bar's running pivot share (selection is `select:`)
    pivot_max_mean: float = ProfileConfig.pivot_max_mean

    def to_config(self, seed: int, verifier: str, cap: int) -> ProfileConfig:
        """The profiler's config: ``seed`` fills an unset seed, ``verifier`` is the stage's, ``cap`` is the
        generation cap the stage resolved from :attr:`max_new_tokens` and the env's own limit."""
        return profile_config(
            k=self.k,
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=cap,
            seed=seed if self.seed is None else self.seed,
            verifier=verifier,
            block=self.block,
            adaptive=self.adaptive,
            timeout=self.timeout,
            chunk=self.chunk,
            pivot_max_mean=self.pivot_max_mean,
        )


#: the trainer config each trainer section overrides (``warmup`` is an SFT run of its own)
TRAINER_SECTIONS = ("sft", "pivot", "e2e", "warmup")
#: trainer fields the experiment decides itself; in a trainer section they are an error (they would be
#: overridden, or would break the comparison), with where to say it instead
EXPERIMENT_SETS = {
    "model": "the top-level `model` (and `rl_init` for PivotRL and E2E RL)",
    "seed": "the top-level `seeds`",
    "output_dir": "`pivotgym experiment --out`",
    "resume": "the experiment itself, which resumes by stage",
    "pivots": "the profile stage (the selection rule is `select`)",
    "profiles": "the profile stage (options in `profile`)",
    "trajectories": "the expert stage (`env`, `train_tasks`)",
    "verifier": "the top-level `verifier` (the exact one is the `exact_reward` ablation)",
    "env_id": "the top-level `env`",
    "sampler": "the top-level `sampler` (one sampler for the whole run)",
    "sampler_options": "the top-level `sampler_options`",
}


def check_judge(settings: Mapping[str, Any]) -> None:
    """The ``judge`` section as :class:`~pivotgym.verify.JudgeVerifier` takes it: a key that is neither one of
    its arguments nor an option of the named sampler's constructor is a :class:`ConfigError` with the close
    matches, at load, before any stage runs (a sampler that takes ``**options`` accepts any key)."""
    import difflib
    import inspect

    from pivotgym.registry import get_registry, resolve
    from pivotgym.verify.llm_judge import JudgeVerifier

    judge = JudgeVerifier(**settings)  # bad values of its own arguments fail here
    own = set(inspect.signature(JudgeVerifier).parameters) - {"sampler_options"}
    registry = get_registry()
    if judge.sampler_name not in registry.samplers:
        registry.make_sampler(judge.sampler_name)  # RegistryError naming the registered samplers
    params = inspect.signature(resolve(registry.samplers[judge.sampler_name].factory)).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    known = own | set(params)
    for key in settings:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1)
            raise ConfigError(
                f"judge: unknown argument {key!r}" + (f"; did you mean {close[0]!r}?" if close else ""),
                hint=f"the judge's arguments and the {judge.sampler_name!r} sampler's options: "
                + ", ".join(sorted(known)),
            )


def check_trainer_section(name: str, data: Any, source: Source = Source()) -> dict[str, Any]:
    """Check the ``sft``/``pivot``/``e2e`` section ``name`` against its trainer's fields, refusing the fields
    the experiment sets itself (:data:`EXPERIMENT_SETS`); returns the section as a dict."""
    section = check_section(_trainer_class(name), data, source, (name,))
    for key in section:
        if key in EXPERIMENT_SETS:
            raise source.error((name, key), f"is set by the experiment, from {EXPERIMENT_SETS[key]}; remove it here")
    if section.get("report_to"):
        from pivotgym.train.config import check_report_to

        try:
            check_report_to(section["report_to"])
        except ConfigError as exc:
            raise source.error((name, "report_to"), str(exc).removeprefix("report_to: "), hint=exc.hint) from None
    return section


def _trainer_class(section: str) -> type:
    from pivotgym.train.config import E2EConfig, PivotConfig, SFTConfig

    return {"sft": SFTConfig, "pivot": PivotConfig, "e2e": E2EConfig, "warmup": SFTConfig}[section]


@dataclass
class ExperimentConfig:
    """An experiment YAML (every field with its default: docs/training.md; a commented example:
    ``examples/configs/quickstart.yaml``)."""

    #: the run's name: stages write under `runs/<name>/` (unless another output folder is given)
    name: str
    #: the target env (e.g. `planning/blocks-v0`); its test split is the in-domain member
    env: str
    #: the base model: a bundled alias, a local folder or a cached hub id
    model: str = "smollm2-135m"
    #: the registered sampler of every generation in the run (`pivotgym samplers` lists them): profiling,
    #: evaluation, learning curves and the trainers' rollouts. `hf` (transformers) or `vllm` (in-process; the
    #: trainers then keep a colocated engine in step with the policy after each optimiser step). A server
    #: (`openai`) cannot follow trained weights, so it is refused
    sampler: str = "hf"
    #: keyword arguments of that sampler's constructor, for every sampler the run builds (the trainers' too):
    #: for `vllm` the engine's, e.g. `{gpu_memory_utilization: 0.3, max_model_len: 4096}`; for `hf`, `dtype` and
    #: `device` load the models read from disk (the base model; the start model that profiles the turns). The
    #: trainers sample, and evaluate, the model they train in the precision of their section's `mixed_precision`
    #: (with `half_precision_sampler: true`, from a copy cast like a model loaded with `dtype`)
    sampler_options: dict[str, Any] = field(default_factory=dict)
    #: training seeds (a single number means one seed); each trains every method once
    seeds: list[int] = field(default_factory=lambda: [0])
    #: expert trajectories taken from the train split, the data of SFT, PivotRL and E2E RL (null: all)
    train_tasks: int | None = 32
    #: OOD members of the suite (env ids or ENV@SPLIT); the in-domain member is `<env>@test`
    ood: list[str] = field(default_factory=list)
    #: or: a registered suite name whose members are used instead of `<env>@test` + `ood`
    suite: str | None = None
    #: suite evaluation options: `limit`, `max_new_tokens`, `batch_size`, `episodes` (table `EvalSection`)
    eval: EvalSection = field(default_factory=EvalSection)
    #: in-domain learning curves: `metric`, `every` or `points`, `tasks`, `max_turns` (table `CurveSection`)
    curve: CurveSection = field(default_factory=CurveSection)
    #: profiler options: `k`, `temperature`, `max_new_tokens`, ... (table `ProfileSection`)
    profile: ProfileSection = field(default_factory=ProfileSection)
    #: pivot selection rule, the fields of `SelectionRule`: `min_var`, `max_mean`, `min_mean`, `top_n`,
    #: `per_env`, `max_failed_share`
    select: SelectionRule = field(default_factory=SelectionRule)
    #: `SFTConfig` fields for the SFT stage
    sft: dict[str, Any] = field(default_factory=dict)
    #: `PivotConfig` fields for the PivotRL stage
    pivot: dict[str, Any] = field(default_factory=dict)
    #: `E2EConfig` fields for the end-to-end RL stage
    e2e: dict[str, Any] = field(default_factory=dict)
    #: `SFTConfig` fields for the warm-up model (`rl_init: warmup`): format SFT from the base model on its own
    #: `warmup_tasks` expert trajectories, never the training data
    warmup: dict[str, Any] = field(default_factory=dict)
    #: with `rl_init: warmup`, how many expert trajectories of the train split, after the `train_tasks` ones,
    #: teach the warm-up model the action format (a separate set: the model that profiles the turns has not
    #: trained on them)
    warmup_tasks: int = 0
    #: extra PivotRL runs: `random_turns` (as many random profiled turns instead of the pivots),
    #: `exact_reward` (profiled and trained with the exact-match verifier), `placebo` (the same pivots with
    #: advantages shuffled inside each group: zero expected signal, so any change it makes is the optimiser's),
    #: `e2e_progress` (E2E RL rewarded by the env's `progress()` at the episode's end, an extra row beside the
    #: outcome-reward E2E RL that stays the main comparison), `e2e_expert_states` (E2E RL with the outcome
    #: reward whose episodes start from states of the expert trajectories, `start: expert`: the states PivotRL
    #: profiles, for a start model that rarely solves a task from its beginning)
    ablations: list[str] = field(default_factory=lambda: list(ABLATIONS), metadata=choices(ABLATIONS))
    #: the matched SFT baseline (stage `sft-more`: SFT continued for PivotRL's extra optimiser steps); false
    #: skips it
    matched_sft: bool = True
    #: where profiling and verification fan out: `process` (local pool), `serial` or `ray`
    executor: str = field(default="process", metadata=choices(EXECUTORS, key=lambda spec: spec.partition(":")[0]))
    #: keep each training stage's `checkpoints/` when it finishes (false: deleted once the stage is done)
    keep_checkpoints: bool = False
    #: where PivotRL and E2E RL start (and what profiles the turns): ``base`` (the paper's comparison: every
    #: method from the same base model), ``warmup`` (every method - SFT, continued SFT, PivotRL, E2E RL - from
    #: one warm-up model, format SFT on `warmup_tasks` separate expert trajectories, which also profiles the
    #: turns: the paper's same-data comparison for a base model that cannot yet write a legal action) or
    #: ``sft`` (from the SFT model, which profiles its own training turns)
    rl_init: str = field(default="base", metadata=choices(RL_INITS))
    #: the reward of profiling and PivotRL (the pivots and the PivotRL rows): `functional` (the env's own
    #: verifier), `exact`, `judge` (a model asked, arguments in `judge`), or a composition such as
    #: `functional|judge` (the judge where the rule is undecided); held-out turn accuracy is always judged by the
    #: env's functional verifier, so a judged reward is measured by the env's own rule
    verifier: str = "functional"
    #: the `judge` verifier's arguments (`model`, `sampler`, `votes`, `instructions`, sampler options such as
    #: `base_url`; pivotgym.verify.llm_judge), set as $PIVOTGYM_JUDGE for every process of the run
    judge: dict[str, Any] = field(default_factory=dict)
    #: the primary comparison, named before the run: `A-vs-B-SET` with A and B method tags (`pivot`, `sft`,
    #: `sft-more`, `e2e`, `warmup`, `base`, `placebo`, `e2e-expert-states`, ...) and SET `in_domain`, `ood` or
    #: `p_credited` (needs `eval.likelihood`); the report states it first and labels every other comparison
    #: secondary (exploratory: no correction for the many comparisons)
    primary: str = "pivot-vs-sft-in_domain"
    #: the file the config was read from (set by the loader)
    path: Path | None = field(default=None, metadata={INTERNAL: True})

    def __post_init__(self) -> None:
        # sections given as mappings (ExperimentConfig(curve={"metric": "turns"})) are checked and built like a file
        for name, section in (
            ("eval", EvalSection),
            ("curve", CurveSection),
            ("profile", ProfileSection),
            ("select", SelectionRule),
        ):
            value = getattr(self, name)
            if value is None or isinstance(value, Mapping):
                setattr(self, name, build(section, value or {}, prefix=(name,)))
        for name in TRAINER_SECTIONS:
            setattr(self, name, check_trainer_section(name, getattr(self, name) or {}))
        check_field_choices(self)
        check_choices(self)
        from pivotgym.verify.compose import composition

        composition(self.verifier)  # a malformed composition fails at load, with how to write it
        if self.judge:
            check_judge(self.judge)

    @property
    def members(self) -> dict[str, str]:
        """Suite member -> role (``in_domain`` or ``ood``)."""
        if self.suite:
            from pivotgym.registry import get_registry

            return dict(get_registry().suite(self.suite).members)
        return {f"{self.env}@test": "in_domain", **dict.fromkeys(self.ood, "ood")}

    @property
    def in_domain(self) -> list[str]:
        return [k for k, r in self.members.items() if r == "in_domain"]

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON values (what ``config.json`` records)."""
        data = dataclasses.asdict(self)
        data["path"] = str(self.path) if self.path else None
        return data


def check_choices(config: Any, source: Source = Source()) -> None:
    """Raise :class:`ConfigError` at the first value the fields' own choices (:func:`pivotgym.config.choices`,
    checked with the types) do not cover: ``name``/``env`` non-empty, what ``rl_init: warmup`` and
    ``eval.likelihood`` need, a well-formed ``primary``. ``config`` is an :class:`ExperimentConfig` or the raw
    mapping of a file (so errors carry the file's line)."""

    def get(obj: Any, key: str, default: Any = None) -> Any:
        return obj.get(key, default) if isinstance(obj, Mapping) else getattr(obj, key, default)

    for key in ("name", "env"):
        if not get(config, key):
            raise source.error((key,), "must not be empty")
    curve = get(config, "curve") or {}
    metric = get(curve, "metric", "episodes")
    points = get(curve, "points")
    if points is not None and int(points) < 1:
        raise source.error(("curve", "points"), f"must be at least 1, got {points}")
    if points is not None and int(get(curve, "every", 1)) != 1:
        raise source.error(("curve", "points"), "set curve.every or curve.points, not both")
    if get(get(config, "eval") or {}, "likelihood", False) and metric != "turns":
        raise source.error(("eval", "likelihood"), "needs curve.metric: turns (it scores the held-out expert states)")
    if get(config, "rl_init", "base") == "warmup":
        if int(get(config, "warmup_tasks", 0) or 0) < 1:
            raise source.error(
                ("warmup_tasks",), "must be at least 1 with rl_init: warmup (the warm-up model's own trajectories)"
            )
        if get(config, "train_tasks", 32) is None:
            raise source.error(
                ("train_tasks",), "must be a number with rl_init: warmup (the warm-up set follows those tasks)"
            )
    executor = str(get(config, "executor", "process") or "process")
    if executor.partition(":")[0] == "ray" and importlib.util.find_spec("ray") is None:
        raise source.error(
            ("executor",), "ray is not installed", hint="pip install 'ray==2.60.0', or executor: process"
        )
    primary = get(config, "primary", "pivot-vs-sft-in_domain")
    parsed = parse_comparison(str(primary))
    if parsed is None:
        raise source.error(
            ("primary",),
            f"must be A-vs-B-SET with method tags A, B ({', '.join(METHOD_TAGS)}) and SET one of "
            f"{', '.join(COMPARISON_SETS)}, got {primary!r}",
        )
    if parsed[2] == "p_credited" and not get(get(config, "eval") or {}, "likelihood", False):
        raise source.error(("primary",), "compares p_credited, which needs eval.likelihood: true")


def parse_comparison(key: str) -> tuple[str, str, str] | None:
    """``("pivot", "sft", "p_credited")`` for ``pivot-vs-sft-p_credited``; None when ``key`` does not name two
    method tags and a comparison set."""
    match = re.fullmatch(r"(.+)-vs-(.+)-(" + "|".join(COMPARISON_SETS) + ")", key)
    if not match or match.group(1) not in METHOD_TAGS or match.group(2) not in METHOD_TAGS:
        return None
    return match.group(1), match.group(2), match.group(3)


def load_experiment(path: str | Path) -> ExperimentConfig:
    """Read an experiment YAML and check it whole (keys, types, allowed values of every section)."""
    data, source = read_yaml(path, what="experiment config")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a YAML mapping of key: value")
    if "seeds" in data and not isinstance(data["seeds"], list):
        data["seeds"] = [data["seeds"]]  # `seeds: 3` means [3]
    check_section(ExperimentConfig, data, source)  # keys and types of the whole file, sections included
    for name in TRAINER_SECTIONS:
        check_trainer_section(name, data.get(name), source)
    check_choices(data, source)
    config = build(ExperimentConfig, data, source)
    config.path = Path(path)
    return config


def check_ids(config: ExperimentConfig) -> None:
    """Raise :class:`ConfigError` naming the file and field when the config names an env, suite or sampler
    that is not installed; run before anything is written, so a typo leaves no empty run folder behind."""
    from pivotgym.eval import Member
    from pivotgym.registry import get_registry

    registry = get_registry()
    where = f"{config.path}: " if config.path else ""

    def sampler() -> None:
        from pivotgym.registry import resolve
        from pivotgym.train.policy_sampler import follows_weights

        if config.sampler not in registry.samplers:
            raise RegistryError(
                f"unknown sampler {config.sampler!r}{did_you_mean(config.sampler, registry.samplers)}. "
                "Run `pivotgym samplers` to list what is installed."
            )
        if not follows_weights(config.sampler, resolve(registry.samplers[config.sampler].factory)):
            raise ConfigError(
                f"{where}sampler: {config.sampler!r} cannot sample the models the run trains (it cannot be given "
                "their weights); use hf or vllm (or profile and evaluate with it through `pivotgym profile` and "
                "`pivotgym eval`)"
            )

    def env(key: str) -> Callable[[], Any]:
        return lambda: registry.env_spec(Member.parse(key, "ood").env_id)

    checks: list[tuple[str, Callable[[], Any]]] = [("env", lambda: registry.env_spec(config.env)), ("sampler", sampler)]
    if config.suite:
        checks.append(("suite", lambda: registry.suite(config.suite or "")))
    checks += [(f"ood[{i}]", env(member)) for i, member in enumerate(config.ood)]
    for field_name, check in checks:
        try:
            check()
        except RegistryError as exc:
            raise ConfigError(f"{where}{field_name}: {exc}") from None
    if config.suite:
        for key in config.members:
            try:
                registry.env_spec(Member.parse(key, "ood").env_id)
            except RegistryError as exc:
                raise ConfigError(f"{where}suite {config.suite!r} member {key!r}: {exc}") from None
