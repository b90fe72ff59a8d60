"""The turn profiler: for every assistant turn of every expert trajectory, sample K actions from a frozen
reference policy and score each with the env's functional verifier (PivotRL's offline profiling pass).

How a state is built: :func:`pivotgym.states.expert_states` gives, for assistant turn t, the expert state (the
message prefix, the expert's message, the functions offered, and the state's key); every row carries it
(``TurnProfile.state``), so selection and training read the profile alone. The prompt is
``env.prompt_messages(prefix)`` (assistant turns rendered to the text a policy emits; the sampler tokenises it
once and keeps those token ids). The verifier sees the env state at
turn t through :class:`~pivotgym.verify.VerifyContext` (replay or snapshot), in executor workers. A sample
is at most the env's own generation limit long (:func:`pivotgym.env.generation_cap`, the rule evaluation and
training use too); ``ProfileConfig.params.max_new_tokens`` can only shorten it.

Caching and resume: every state has a content-hash ``key`` over everything that determines its result
(the state's content, env id, reference model and revision, sampling params, seed, K, block size, verifier
name and version, adaptive rule). The output file doubles as the cache: a re-run skips the keys already in
it. Each state's sampling seeds are derived from its key (one seed per block of samples), so a state's
result does not depend on which other states run with it, and rows are written in plan order, one fsynced
line at a time: a run killed at any point and resumed writes the same file as an uninterrupted run.

Adaptive K (:class:`~pivotgym.pivot.adaptive.AdaptiveK`) samples a state in blocks and stops as soon as the
pivot decision is settled; see :mod:`pivotgym.pivot.adaptive` for the rules and the stated error bound.

Undecided verifications (:attr:`pivotgym.types.Verdict.undecided`) are not rewards: a row's ``rewards``,
``mean``, ``var`` and ``k`` cover the judged samples only, and ``undecided`` holds the reason of each of the
rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pivotgym.env import generation_cap
from pivotgym.execution import Executor, TaskResult, chunks, make_executor
from pivotgym.jsonl import JsonlAppender, iter_jsonl
from pivotgym.pivot.adaptive import AdaptiveK
from pivotgym.sampling.base import Sampler, SamplingParams, sample_seeded
from pivotgym.states import expert_states
from pivotgym.types import ExpertState, Message, Trajectory, TurnProfile, content_hash
from pivotgym.verify import DEFAULT_CONTEXT_CACHE, Judge, VerifyContext, add_cost, failed_sample, failed_verification

#: bump when the profile computation changes in a way that alters results (part of every key);
#: "2": samples keyed by per-state seeds in batched calls (`sample_seeded`);
#: "3": failed verifications are left out of rewards/mean/var (their reasons: ``undecided``, once
#: ``metadata.failed_reasons``, which reading still accepts); adaptive K's unanimity run is derived from its
#: error bound
PROFILE_FORMAT = "3"

__all__ = [
    "AdaptiveK",
    "ProfileConfig",
    "ProfileResult",
    "Profiler",
    "State",
    "VerifyTask",
    "profile_config",
    "profile_trajectories",
    "map_verify",
    "verify_candidates",
    "worker_judge",
]


# ---------------------------------------------------------------------------------------------- config
@dataclass
class ProfileConfig:
    """What a profiling run does. Everything here that changes results is part of each state's key."""

    k: int = 8
    #: how the reference samples (temperature, top_p, top_k, stop). Its ``max_new_tokens`` is a cap: each env's
    #: own generation limit applies (:func:`pivotgym.env.generation_cap`), which the cap can only shorten.
    #: None: temperature 1 and each env's own limit
    params: SamplingParams | None = None
    seed: int = 0
    #: "functional" (the env's own verifier), "exact", or a registered verifier name
    verifier: str = "functional"
    #: samples per sampler call for fixed K (default: all K at once, one shared prefill)
    block: int | None = None
    adaptive: AdaptiveK | None = None
    #: seconds one verification may take before its worker is killed and the sample fails
    timeout: float | None = 60.0
    #: states profiled together per round (their verifications fan out together)
    chunk: int = 16
    #: threshold for the progress bar's running pivot share (selection itself is separate)
    pivot_max_mean: float = 0.6

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.adaptive is not None:
            self.adaptive.check(self.k)  # an explicit min_unanimous that breaks the stated bound is refused

    def params_for(self, env: Any) -> SamplingParams:
        """The sampling of ``env``'s states: :attr:`params` with ``max_new_tokens`` set to the env's own limit,
        shortened by ``params.max_new_tokens`` when that is smaller (the one rule of evaluation, profiling and
        training), without a seed (each state's seeds are derived from its key)."""
        base = self.params if self.params is not None else SamplingParams(temperature=1.0)
        cap = self.params.max_new_tokens if self.params is not None else None
        return replace(base, max_new_tokens=generation_cap(env, cap), seed=None)

    @property
    def block_size(self) -> int:
        if self.adaptive is not None:
            return min(self.adaptive.block, self.k)
        return min(self.block or self.k, self.k)


def profile_config(
    *, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int, **fields: Any
) -> ProfileConfig:
    """A :class:`ProfileConfig` from options written flat, as the command line and the experiment's ``profile:``
    section write them: the sampling options become :attr:`ProfileConfig.params`, the rest are its fields."""
    params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    return ProfileConfig(params=params, **fields)


@dataclass
class State:
    """One candidate pivot state, planned for profiling: the expert state and how this run profiles it."""

    expert: ExpertState
    #: the row's cache key: the state's stream, K, the verifier and the adaptive rule (see the module docstring)
    key: str
    #: the state's random stream: its key and the reference weights; every block's seed derives from it
    stream: str
    prompt: list[Message]
    verifier: str
    #: the sampling of this state (its env's generation cap applied; see :meth:`ProfileConfig.params_for`)
    params: SamplingParams = field(default_factory=SamplingParams)


@dataclass
class ProfileResult:
    """Every profile of the plan (in plan order, cached ones included) plus run statistics."""

    profiles: list[TurnProfile]
    stats: dict[str, Any]


# ---------------------------------------------------------------------------------------------- verification
@dataclass
class VerifyTask:
    """The candidates to verify at one expert state, judged together (a verifier with ``verify_batch``, such as
    the model judge, takes them in one call); picklable (the env is rebuilt in the worker through the
    registry)."""

    verifier: str
    state: ExpertState
    candidates: tuple[str, ...]


#: states whose contexts (positioned envs) a worker keeps (the verify layer's default)
_CONTEXT_CACHE = DEFAULT_CONTEXT_CACHE
#: this process's judge (verifiers made once, contexts cached per state); made on first use in each worker
_JUDGE: list[Judge] = []


def worker_judge() -> Judge:
    """The judge of this process: one per executor worker, so a state's prefix is replayed once per worker,
    not once per sample."""
    if not _JUDGE:
        from pivotgym.registry import get_registry

        _JUDGE.append(Judge(lambda name: get_registry().make_verifier(name), max_contexts=_CONTEXT_CACHE))
    return _JUDGE[0]


def verify_candidates(task: VerifyTask) -> list[dict[str, Any]]:
    """Verify a state's candidates in a worker: per candidate ``{"reward", "reason", "undecided", "cost"}``,
    where ``undecided`` is :attr:`pivotgym.types.Verdict.undecided` (None for a judgement) and ``cost`` what
    the verdict says it cost (the model judge's calls, tokens and seconds; empty for a rule)."""
    state = task.state
    verdicts = worker_judge().verdicts(task.verifier, state.key, lambda: VerifyContext.at(state), task.candidates)
    out = []
    for verdict in verdicts:
        cost: dict[str, float] = {}
        add_cost(cost, verdict)
        out.append(
            {"reward": verdict.reward, "reason": verdict.reason[:300], "undecided": verdict.undecided, "cost": cost}
        )
    return out


def map_verify(executor: Executor, tasks: Sequence[VerifyTask], timeout: float | None) -> list[TaskResult]:
    """Run :func:`verify_candidates` over ``tasks`` through ``executor``, ``timeout`` seconds per candidate."""
    if not tasks:
        return []
    most = max(len(t.candidates) for t in tasks)
    return executor.map(verify_candidates, list(tasks), timeout=None if timeout is None else timeout * most)


# ---------------------------------------------------------------------------------------------- the profiler
class Profiler:
    """Profiles states with a frozen reference ``sampler`` and verifies samples through ``executor``."""

    def __init__(
        self,
        sampler: Sampler,
        config: ProfileConfig | None = None,
        executor: Executor | str | None = None,
        registry: Any = None,
    ) -> None:
        from pivotgym.registry import get_registry

        self.sampler = sampler
        self.config = config or ProfileConfig()
        self._own_executor = not isinstance(executor, Executor)
        self.executor = make_executor(executor, timeout=self.config.timeout)
        self.registry = registry or get_registry()
        self._envs: dict[str, Any] = {}
        self._verifier_info: dict[str, dict[str, str]] = {}
        #: what this profile's verdicts said they cost (the model judge's calls, tokens, seconds), by name
        self.verifier_cost: dict[str, float] = {}
        described = dict(sampler.describe() or {})
        self.reference_model = {k: described.get(k) for k in ("model", "revision", "backend")}

    # ------------------------------------------------------------------ planning
    def _env(self, env_id: str) -> Any:
        if env_id not in self._envs:
            self._envs[env_id] = self.registry.make(env_id)
        return self._envs[env_id]

    def _verifier(self, env_id: str) -> tuple[str, dict[str, str]]:
        name = self.registry.verifier_name_for(env_id, self.config.verifier)
        if name not in self._verifier_info:
            verifier = self.registry.make_verifier(name)
            self._verifier_info[name] = {"name": str(verifier.name), "version": str(verifier.version)}
        return name, self._verifier_info[name]

    def params(self, env_id: str) -> SamplingParams:
        """The sampling of ``env_id``'s states (its own generation limit, shortened by the config's cap)."""
        return self.config.params_for(self._env(env_id))

    def reference(self, env_id: str) -> dict[str, Any]:
        """The ``reference`` field of ``env_id``'s profiles: model, revision, backend, sampling params (with
        the env's generation cap applied), seed."""
        sampling = self.params(env_id).to_dict()
        sampling.pop("seed", None)  # per-state seeds are derived from the key
        return {**self.reference_model, "sampling": sampling, "seed": self.config.seed, "block": self.config.block_size}

    def plan(self, trajectories: Iterable[Trajectory]) -> list[State]:
        """Every assistant turn of every trajectory as a :class:`State`, in order, without duplicates."""
        adaptive = self.config.adaptive.describe(self.config.k) if self.config.adaptive else None
        states: list[State] = []
        seen: set[str] = set()
        for expert in expert_states(trajectories):
            env = self._env(expert.env_id)
            verifier_name, verifier_info = self._verifier(expert.env_id)
            reference = self.reference(expert.env_id)
            stream = content_hash("pivotgym-stream", expert.key, _weights_identity(reference))
            key = content_hash("pivotgym-profile", PROFILE_FORMAT, stream, self.config.k, verifier_info, adaptive)
            if key in seen:
                continue
            seen.add(key)
            prompt = env.prompt_messages(expert.turn.prefix)
            states.append(State(expert, key, stream, prompt, verifier_name, self.params(expert.env_id)))
        return states

    # ------------------------------------------------------------------ running
    def profile(
        self,
        trajectories: Iterable[Trajectory],
        out: str | Path | None = None,
        *,
        resume: bool = True,
        progress: bool = True,
        limit: int | None = None,
    ) -> ProfileResult:
        """Profile every state of ``trajectories``; append rows to ``out`` (skipping keys already there
        when ``resume``). Returns all profiles of the plan in plan order."""
        from tqdm import tqdm

        start = time.perf_counter()
        states = self.plan(trajectories)
        if limit is not None:
            states = states[:limit]
        done: dict[str, TurnProfile] = {}
        foreign = 0
        if out is not None and Path(out).exists():
            if not resume:
                Path(out).unlink()
            else:
                planned = {s.key: s for s in states}
                for row in iter_jsonl(out):
                    if row.get("key") in planned:  # a row written before rows carried their state gets it here
                        done[row["key"]] = replace(TurnProfile.from_dict(row), state=planned[row["key"]].expert)
                    else:
                        foreign += 1
        todo = [s for s in states if s.key not in done]
        new: dict[str, TurnProfile] = {}
        counters = {"samples": 0, "verify_failures": 0, "pivots": 0, "profiled": 0}
        self.verifier_cost = {}
        bar = tqdm(total=len(todo), desc="profile", unit="state", disable=not progress or None, dynamic_ncols=True)
        appender = JsonlAppender(out) if out is not None else None

        def stage(what: str) -> None:  # a chunk can take minutes: the bar says what it is doing meanwhile
            bar.set_description_str(f"profile ({what})")

        try:
            for chunk in chunks(todo, max(1, self.config.chunk)):
                for profile in self._profile_chunk(chunk, counters, stage):
                    if appender is not None:
                        appender.write(profile)
                    new[profile.key] = profile
                    counters["profiled"] += 1
                    counters["pivots"] += int(profile.var > 0 and profile.mean < self.config.pivot_max_mean)
                    bar.update(1)
                    bar.set_postfix(
                        pivots=f"{counters['pivots'] / counters['profiled']:.0%}",
                        samples=counters["samples"],
                        refresh=False,
                    )
        finally:
            bar.close()
            if appender is not None:
                appender.close()
            if self._own_executor:
                self.executor.close()
        elapsed = time.perf_counter() - start
        profiles = [done.get(s.key) or new[s.key] for s in states]
        stats = {
            "states": len(states),
            "cached": len(done),
            "profiled": counters["profiled"],
            "foreign_rows": foreign,
            "samples": counters["samples"],
            "max_samples": counters["profiled"] * self.config.k,
            "verify_failures": counters["verify_failures"],
            "verifier_cost": dict(self.verifier_cost),
            "elapsed_s": round(elapsed, 3),
            "states_per_s": round(counters["profiled"] / elapsed, 4) if elapsed > 0 else None,
            "pivots": sum(p.var > 0 and p.mean < self.config.pivot_max_mean for p in profiles),
            "executor": self.executor.describe(),
        }
        return ProfileResult(profiles, stats)

    def _block_seed(self, state: State, block_index: int) -> int:
        return int(content_hash(state.stream, "block", block_index)[:8], 16)

    def _sample(self, states: list[State], wanted: list[int], round_index: int) -> list[list[Any]]:
        """One block of samples per state, each under its own derived seed, so a state draws the same samples
        whatever chunk it lands in. States asking for the same block size and generation cap share one batched call
        (:func:`~pivotgym.sampling.base.sample_seeded`); a server backend (``concurrency > 1``, e.g. the
        OpenAI-compatible client) gets the states' requests concurrently instead."""
        seeds = [self._block_seed(state, round_index) for state in states]
        concurrency = int(getattr(self.sampler, "concurrency", 1) or 1)
        if concurrency > 1 and len(states) > 1:
            from concurrent.futures import ThreadPoolExecutor

            def one(i: int) -> list[Any]:
                params = replace(states[i].params, seed=seeds[i])
                return self.sampler.sample([states[i].prompt], n=wanted[i], params=params)[0]

            with ThreadPoolExecutor(max_workers=min(concurrency, len(states))) as pool:
                return list(pool.map(one, range(len(states))))
        results: list[list[Any]] = [[] for _ in states]
        batches = sorted({(wanted[i], states[i].params.max_new_tokens) for i in range(len(states))})
        for n, tokens in batches:  # one batched call per block size and generation cap
            picked = [i for i, st in enumerate(states) if (wanted[i], st.params.max_new_tokens) == (n, tokens)]
            groups = sample_seeded(
                self.sampler,
                [states[i].prompt for i in picked],
                n,
                states[picked[0]].params,
                [seeds[i] for i in picked],
            )
            for i, group in zip(picked, groups):
                results[i] = group
        return results

    def _profile_chunk(
        self, chunk: list[State], counters: dict[str, int], stage: Callable[[str], None] | None = None
    ) -> list[TurnProfile]:
        """Profile a few states together: sample a block for each active state, verify all candidates in one
        fan-out, and repeat until every state is done (once for fixed K).

        A sample whose verification was undecided (:attr:`pivotgym.types.Verdict.undecided`: the verifier could
        not judge, raised, timed out or crashed) or whose sampling failed is not a reward: it uses up one of the
        K draws but goes to ``undecided`` instead of the rewards, so it never moves a state's mean or
        variance."""
        k, block = self.config.k, self.config.block_size
        rewards: dict[str, list[float]] = {s.key: [] for s in chunk}
        reasons: dict[str, list[str]] = {s.key: [] for s in chunk}
        failed: dict[str, list[str]] = {s.key: [] for s in chunk}
        prompt_tokens: dict[str, int] = {}
        stopped: dict[str, str] = {}
        active = list(chunk)
        round_index = 0

        def drawn(key: str) -> int:
            return len(rewards[key]) + len(failed[key])

        while active:
            tasks: list[VerifyTask] = []
            # (state key, (task index, candidate index) | None, failure)
            slots: list[tuple[str, tuple[int, int] | None, str | None]] = []
            wanted = [min(block, k - drawn(s.key)) for s in active]
            if stage is not None:
                stage(f"sampling {sum(wanted)} actions for {len(active)} states")
            for state, n, completions in zip(active, wanted, self._sample(active, wanted, round_index)):
                counters["samples"] += len(completions)
                if completions and completions[0].prompt_token_ids:
                    prompt_tokens[state.key] = len(completions[0].prompt_token_ids)
                for _ in range(n - len(completions)):  # a backend that returned fewer than asked
                    slots.append((state.key, None, failed_sample("no completion returned").reason))
                texts: list[str] = []
                for completion in completions[:n]:
                    if completion.finish_reason == "error":
                        slots.append((state.key, None, failed_sample(completion.text[:200]).reason))
                        continue
                    slots.append((state.key, (len(tasks), len(texts)), None))
                    texts.append(completion.text)
                if texts:
                    tasks.append(VerifyTask(state.verifier, state.expert, tuple(texts)))
            if stage is not None:
                stage(f"verifying {sum(len(t.candidates) for t in tasks)} actions")
            results = map_verify(self.executor, tasks, self.config.timeout)
            for key, at, failure in slots:
                if at is not None:
                    result: TaskResult = results[at[0]]
                    value = result.value[at[1]] if result.ok else None
                    if value is not None:
                        add_cost(self.verifier_cost, value.get("cost") or {})
                    if value is not None and not value.get("undecided"):
                        rewards[key].append(float(value["reward"]))
                        reasons[key].append(str(value["reason"]))
                        continue
                    failure = str(value["undecided"]) if value is not None else failed_verification(result.error).reason
                    counters["verify_failures"] += 1
                failed[key].append(failure or "undecided")
            still: list[State] = []
            for state in active:
                reason = "budget" if drawn(state.key) >= k else None
                if reason is None and self.config.adaptive is not None:
                    # the rules read the valid rewards against the draws still possible for valid ones
                    reason = self.config.adaptive.stop_reason(rewards[state.key], k - len(failed[state.key]))
                if reason is None:
                    still.append(state)
                else:
                    stopped[state.key] = reason
            active = still
            round_index += 1
        return [
            self._row(s, rewards[s.key], reasons[s.key], failed[s.key], stopped[s.key], prompt_tokens.get(s.key))
            for s in chunk
        ]

    def _row(
        self,
        state: State,
        rewards: list[float],
        reasons: list[str],
        failed: list[str],
        stopped: str,
        prompt_tokens: int | None,
    ) -> TurnProfile:
        turn = state.expert.turn
        n = len(rewards)
        mean = sum(rewards) / n if n else 0.0
        var = sum((r - mean) ** 2 for r in rewards) / n if n else 0.0
        if var < 1e-15:
            var = 0.0
        metadata: dict[str, Any] = {"k_max": self.config.k, "stopped": stopped}
        if self.config.adaptive is not None:
            metadata["adaptive"] = self.config.adaptive.describe(self.config.k)
        if prompt_tokens is not None:
            metadata["prompt_tokens"] = prompt_tokens
        _, verifier_info = self._verifier(turn.env_id)
        return TurnProfile(
            trajectory_id=turn.trajectory_id,
            turn=turn.turn,
            env_id=turn.env_id,
            task_id=turn.task_id,
            k=n,
            rewards=rewards,
            mean=round(mean, 12),
            var=round(var, 12),
            reasons=reasons,
            reference=self.reference(turn.env_id),
            verifier=dict(verifier_info),
            key=state.key,
            metadata=metadata,
            undecided=failed,
            state=state.expert,
        )


def profile_trajectories(
    trajectories: Iterable[Trajectory],
    sampler: Sampler,
    *,
    out: str | Path | None = None,
    executor: Executor | str | None = None,
    resume: bool = True,
    progress: bool = True,
    config: ProfileConfig | None = None,
    **fields: Any,
) -> ProfileResult:
    """One-call profiling: ``profile_trajectories(trajs, sampler, k=8, out="profiles.jsonl")``, with the
    :class:`ProfileConfig` given whole (``config=``) or as its fields, not both."""
    if config is not None and fields:
        raise TypeError(f"profile_trajectories: pass config= or its fields, not both (got {sorted(fields)})")
    return Profiler(sampler, config or ProfileConfig(**fields), executor).profile(
        trajectories, out, resume=resume, progress=progress
    )


def _weights_identity(reference: Mapping[str, Any]) -> dict[str, Any]:
    """``reference`` as the random stream and cache keys see it: for a model folder, whose revision is a hash of
    its files, the folder's path is left out, so the same weights in another run folder (``--out``) draw the
    same samples and hit the same cache rows. A bundled or in-memory model keeps its name."""
    if reference.get("revision") and Path(str(reference.get("model") or "")).expanduser().is_dir():
        return {k: v for k, v in reference.items() if k != "model"}
    return dict(reference)
