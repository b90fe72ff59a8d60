"""The shared state of one experiment run and its in-domain measurements (learning-curve points and the
suite evaluation of each model)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pivotgym.errors import ConfigError, PivotgymError
from pivotgym.eval import write_json
from pivotgym.experiment.config import ExperimentConfig
from pivotgym.experiment.layout import RunLayout, rl_start_stage
from pivotgym.jsonl import read_jsonl, read_trajectories, write_jsonl

__all__ = ["Run"]

T = TypeVar("T")


class Run:
    """Paths (:class:`RunLayout`), samplers, the verification executor and the in-domain measurements of one
    experiment run."""

    def __init__(self, config: ExperimentConfig, root: str | Path) -> None:
        self.config = config
        self.layout = RunLayout(root)
        self.layout.make_dirs()
        self._base_sampler: Any = None
        self._opened: list[Any] = []
        self._curve_tasks: list[Any] | None = None
        self._held_out: list[Any] | None = None
        self._executor: Any = None
        self._greedy: Any = None
        self._floors: Any = None

    @property
    def root(self) -> Path:
        return self.layout.root

    def reward_verifier(self, tag: str) -> str:
        """The verifier a profile or PivotRL run of verifier ``tag`` is rewarded by: the config's ``verifier``
        for the main rows (tag ``functional``), the tag itself for an ablation's (``exact``)."""
        return self.config.verifier if tag == "functional" else tag

    @property
    def curve_metric(self) -> str:
        """``episodes`` or ``turns`` (see :data:`~pivotgym.experiment.config.CURVE_METRICS`)."""
        return self.config.curve.metric

    def executor(self) -> Any:
        """One verification executor for every turn-accuracy evaluation of the run (workers stay warm and
        keep their per-process verifier caches)."""
        from pivotgym.execution import make_executor

        if self._executor is None:
            self._executor = make_executor(self.config.executor, timeout=60.0)
        return self._executor

    def close(self) -> None:
        """Close everything the run holds: its engines (:meth:`release_samplers`) and the executor."""
        self.release_samplers()
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def make_sampler(self, model: str | Path) -> Any:
        """A sampler of ``model`` from the sampler registry (``config.sampler``, default ``hf``) with
        ``config.sampler_options``; the run closes it in :meth:`release_samplers`."""
        return self.own(self._build_sampler(model))

    def _build_sampler(self, model: str | Path) -> Any:
        from pivotgym.registry import make_sampler

        return make_sampler(self.config.sampler, str(model), self.config.sampler_options, max_batch_size=32)

    def own(self, opened: T) -> T:
        """Have :meth:`release_samplers` close ``opened`` (a sampler, or a trainer and its colocated engine)."""
        self._opened.append(opened)
        return opened

    def release_samplers(self) -> None:
        """Close the samplers and trainers the run opened (:meth:`own`), before a trainer builds its own engine
        and after every stage: two vLLM engines alive at once share one device's memory, and an engine that is
        only dropped is never freed (:func:`~pivotgym.sampling.base.close_sampler`). The base sampler is kept
        when it is the cheap ``hf`` one, which several stages reuse."""
        from pivotgym.sampling.base import close_sampler
        from pivotgym.train.policy_sampler import LIVE_SAMPLER

        opened, self._opened = self._opened, []
        if self.config.sampler != LIVE_SAMPLER:
            self._base_sampler = None  # closed below
        for thing in reversed(opened):
            close_sampler(thing)  # a trainer's close() shuts its colocated engine
        if opened:
            import gc

            gc.collect()  # the trainers' models and optimiser states, held in reference cycles
            return_freed_memory()

    def base_sampler(self) -> Any:
        from pivotgym.train.policy_sampler import LIVE_SAMPLER

        if self._base_sampler is None:
            self._base_sampler = self._build_sampler(self.config.model)
            if self.config.sampler != LIVE_SAMPLER:
                self.own(self._base_sampler)
        return self._base_sampler

    @property
    def rl_start(self) -> str:
        """The stage whose model PivotRL and E2E RL start from: ``base``, ``sft`` or ``warmup``."""
        return rl_start_stage(self.config.rl_init)

    def rl_model(self, seed: int) -> str:
        """The model PivotRL and E2E RL start from (and that profiles the turns) for ``seed``."""
        return self.config.model if self.rl_start == "base" else str(self.layout.model(self.rl_start, seed))

    def rl_sampler(self, seed: int) -> Any:
        """A sampler of :meth:`rl_model` (the base sampler is shared)."""
        return self.base_sampler() if self.rl_start == "base" else self.make_sampler(self.rl_model(seed))

    def env(self, **kwargs: Any) -> Any:
        from pivotgym.registry import make

        return make(self.config.env, **kwargs)

    def curve_tasks(self) -> list[Any]:
        """The first ``curve.tasks`` test tasks (all of them when unset)."""
        if self._curve_tasks is None:
            tasks = list(self.env().tasks("test"))
            cap = self.config.curve.tasks
            self._curve_tasks = tasks if cap is None else tasks[:cap]
        return self._curve_tasks

    def held_out_trajectories(self) -> list[Any]:
        """Expert trajectories of the curve tasks (test split), written once to ``data/test-expert.jsonl``:
        the states of the turn-accuracy metric. Never trained on: SFT, PivotRL and E2E RL see the train split."""
        if self._held_out is None:
            path = self.layout.held_out
            if not path.exists():
                wanted = {t.id for t in self.curve_tasks()}
                trajs = [t for t in self.env().expert_trajectories("test") if t.task_id in wanted and t.reward > 0]
                if not trajs:
                    raise ConfigError(
                        f"{self.config.env}: no successful expert trajectory on the test split, so "
                        "turn accuracy has no states; use curve.metric: episodes"
                    )
                write_jsonl(path, trajs)
            self._held_out = read_trajectories(path)
        return self._held_out

    def floors(self) -> dict[str, Any]:
        """The floors of turn accuracy on the held-out states (:func:`pivotgym.eval.floors.floors`): the score
        of a uniformly random legal action, of the expert's own action, and the share of states where the
        verifier credits two or more distinct actions, each over the same problems as turn accuracy (over the
        env's candidate actions where it has no legal ones); or ``{"unsupported": ...}`` when it has neither."""
        result = self.floors_result()
        if not result.judged:
            return {
                "env_id": self.config.env,
                "unsupported": f"{self.config.env} enumerates neither legal nor candidate actions",
            }
        return result.to_dict()

    def floors_result(self) -> Any:
        """The :class:`~pivotgym.eval.floors.FloorsResult` of the held-out states, measured once per process
        (the likelihood scores of every model reuse its legal actions and verdicts)."""
        from pivotgym.eval.floors import floors

        if self._floors is None:
            result = floors(self.env(), trajectories=self.held_out_trajectories(), executor=self.executor())
            if result.failed and not result.judged:  # not "no legal actions": nothing could be judged at all
                reason = next((r for s in result.states for r in s.failed_reasons), "unknown")
                raise PivotgymError(
                    f"floors of {self.config.env}: the verification of every held-out state failed "
                    f"({result.failed} states; first reason: {reason})",
                    hint="check that the verifier runs in a worker: pivotgym verify, or executor: serial in the config",
                )
            self._floors = result
        return self._floors

    def likelihood_scores(self, sampler: Any, *, decode: bool = False) -> dict[str, Any]:
        """Per held-out task (the floors' task order) the probability ``sampler``'s model puts on a credited
        action (``p_credited``) and on a legal one (``p_legal``): :func:`pivotgym.eval.likelihood.likelihood_scores`.
        With ``decode`` also ``"answers"``: the greedy answers decoded on the scoring pass (for turn accuracy)."""
        from pivotgym.eval.likelihood import likelihood_scores

        floors = self.floors_result()
        if not floors.judged:
            raise ConfigError(
                f"eval.likelihood: {self.config.env} does not enumerate its legal actions (legal_actions() is None)"
            )
        result = likelihood_scores(sampler, floors, self.env(), cap=self.config.eval.max_new_tokens, decode=decode)
        scores: dict[str, Any] = {
            "task_ids": list(result.task_ids),
            **{m: list(result.per_task[m]) for m in ("p_credited", "p_legal")},
        }
        if decode:
            scores["answers"] = [s.greedy for s in result.states if s.greedy is not None]
        return scores

    def generation_cap(self, cap: int | None) -> int:
        """New tokens per turn in the target env: its own limit, which ``cap`` can only shorten."""
        from pivotgym.env import generation_cap

        return generation_cap(self.env(), cap)

    def greedy_params(self) -> Any:
        """Greedy decoding for the in-domain measurements, capped like the suite caps a member: the env's own
        ``max_new_tokens``, which ``eval.max_new_tokens`` can only shorten."""
        from pivotgym.sampling.base import SamplingParams

        if self._greedy is None:
            self._greedy = SamplingParams(
                temperature=0.0, max_new_tokens=self.generation_cap(self.config.eval.max_new_tokens)
            )
        return self._greedy

    def turn_accuracy_per_task(self, sampler: Any, answers: Sequence[Any] = ()) -> tuple[list[float], dict[str, int]]:
        """Per test task (in :meth:`held_out_trajectories` order) the turn accuracy of ``sampler``
        (:func:`pivotgym.eval.turns.turn_accuracy`, judging ``answers`` where given), and ``{"states",
        "failed", "answered"}``."""
        from pivotgym.eval.turns import turn_accuracy

        result = turn_accuracy(
            sampler,
            self.held_out_trajectories(),
            self.greedy_params(),
            executor=self.executor(),
            chunk=max(16, self.config.eval.batch_size),
            answers=answers,
        )
        return result.per_task, {"states": result.states, "failed": result.failed, "answered": result.answered}

    def in_domain_per_task(self, sampler: Any) -> list[float]:
        """Outcome score (capped at 1) of one greedy episode per curve task, in task order."""
        from pivotgym.rollout import greedy_episodes

        kwargs = {"max_turns": self.config.curve.max_turns} if self.config.curve.max_turns else {}
        rows = greedy_episodes(
            sampler,
            lambda: self.env(**kwargs),
            self.curve_tasks(),
            self.greedy_params(),
            batch_size=self.config.eval.batch_size,
            progress=True,
            desc="greedy episodes",
        )
        return [min(1.0, float(r["reward"])) for r in rows]

    def curve_point(self, sampler: Any) -> dict[str, Any]:
        """``{"score", "per_task", "tasks"}`` of ``sampler`` on the curve tasks (the learning curves' y axis),
        by :attr:`curve_metric` (turn accuracy points also carry ``states``, ``failed`` and ``answered``).

        With ``eval.likelihood`` a turn-accuracy point also carries the likelihood scores (``likelihood``),
        measured first: their scoring pass decodes the greedy answers too, so turn accuracy only judges them
        instead of generating (:func:`pivotgym.sampling.action_scores.forest_scores`)."""
        extra: dict[str, Any] = {}
        if self.curve_metric == "turns":
            scored = self.likelihood_scores(sampler, decode=True) if self.config.eval.likelihood else None
            answers = scored.pop("answers") if scored else ()
            per_task, counts = self.turn_accuracy_per_task(sampler, answers)
            extra.update(counts)
            if scored:
                extra["likelihood"] = scored
        else:
            per_task = self.in_domain_per_task(sampler)
        return {
            "score": sum(per_task) / max(1, len(per_task)),
            "per_task": per_task,
            "tasks": len(per_task),
            "metric": self.curve_metric,
            **extra,
        }

    def curve_point_from_eval(self, result: Path) -> dict[str, Any] | None:
        """The curve point read from a suite evaluation's items when that evaluation ran the same measurement
        on every curve task (see :meth:`evaluate`); None otherwise. Saves a second, identical in-domain
        evaluation of base and SFT."""
        items = self.layout.items(result)
        if self.config.suite or not items.exists():
            return None
        member = f"{self.config.env}@test"
        rows = [r for r in read_jsonl(items) if r.get("member") == member]
        turns = self.curve_metric == "turns"
        if any((r.get("metric") == "turn_accuracy") != turns for r in rows):
            return None  # written under the other curve metric
        rewards = {r["task_id"]: float(r["reward"]) for r in rows}
        ids = self._curve_task_ids()
        if not all(i in rewards for i in ids):
            return None
        per_task = [min(1.0, rewards[i]) for i in ids]
        return {
            "score": sum(per_task) / max(1, len(per_task)),
            "per_task": per_task,
            "tasks": len(per_task),
            "metric": self.curve_metric,
            "from": str(items.name),
        }

    def start_point(self, sampler: Any, result: Path) -> dict[str, Any]:
        """The curve point of a just-evaluated model: read from its evaluation when possible, else measured."""
        return self.curve_point_from_eval(result) or self.curve_point(sampler)

    @property
    def _in_domain_metric(self) -> str:
        return "turn_accuracy" if self.curve_metric == "turns" else "success"

    def _curve_task_ids(self) -> list[str]:
        """Task ids of a curve point's ``per_task`` scores, in order."""
        if self.curve_metric == "turns":
            return list(dict.fromkeys(t.task_id for t in self.held_out_trajectories()))
        return [t.id for t in self.curve_tasks()]

    def rl_start_point(self, seed: int) -> dict[str, Any]:
        """Curve score and per-task scores of :meth:`rl_model` (the learning curves' first point)."""
        path = (
            self.layout.curve_start("base") if self.rl_start == "base" else self.layout.curve_start(self.rl_start, seed)
        )
        return json.loads(path.read_text())

    def expert_task_ids(self) -> list[str]:
        """Task ids of the expert trajectories (first-seen order): the data of SFT, PivotRL and E2E RL."""
        return list(dict.fromkeys(t.task_id for t in read_trajectories(self.layout.expert)))

    def evaluate(
        self, sampler: Any, out: Path, members: Sequence[str] | None = None, in_domain: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The suite evaluation written to ``out`` (and its items beside it, :meth:`RunLayout.items`).

        Unless the config names a registered suite, the in-domain member ``<env>@test`` is scored by the same
        measurement as the learning curves whenever the curves are not the suite's plain episodes
        (``curve.metric: turns``, or a ``curve.max_turns`` cap the suite runner does not know), so the table and
        the curves measure one thing; ``in_domain`` passes that measurement (a learning curve's last point, same
        model: :meth:`curve_point`, likelihood scores included) when it was just made, instead of measuring
        again. With ``curve.metric: turns`` the capped greedy episodes are also run (``eval.episodes``) and
        reported as the member ``<env>@test:episodes`` with role ``episodes``, beside turn accuracy rather than
        averaged into it."""
        from pivotgym.eval import evaluate_suite, role_averages, summarize

        ev, curve = self.config.eval, self.config.curve
        kwargs: dict[str, Any] = {
            "limit": ev.limit,
            "max_new_tokens": ev.max_new_tokens,
            "model": out.stem,
            "batch_size": ev.batch_size,
            "progress": True,
            "name": self.config.suite or self.config.name,
        }
        member = f"{self.config.env}@test"
        chosen = list(self.config.members) if members is None else list(members)
        custom = self.curve_metric == "turns" or bool(curve.max_turns)
        if self.config.suite or not custom or member not in chosen:
            return evaluate_suite(self.config.members, sampler, out, members=members, **kwargs)
        others = [m for m in chosen if m != member]
        part = self.layout.ood_part(out)
        result = (
            evaluate_suite(self.config.members, sampler, part, members=others, **kwargs)
            if others
            else {"suite": kwargs["name"], "model": out.stem, "scores": {}, "role": {}}
        )
        scores: dict[str, Any] = {}
        roles: dict[str, str] = {}
        rows: list[dict[str, Any]] = []
        metric = self._in_domain_metric
        started = time.perf_counter()
        point = self.curve_point(sampler) if in_domain is None else in_domain
        scores[member] = {
            **summarize(point["per_task"], metric),
            "seconds": round(time.perf_counter() - started, 2),
            **{k: point[k] for k in ("states", "failed", "answered") if k in point},
        }
        roles[member] = "in_domain"
        rows += [
            {"member": member, "task_id": t, "reward": r, "metric": metric}
            for t, r in zip(self._curve_task_ids(), point["per_task"])
        ]
        if self.curve_metric == "turns" and ev.episodes:
            started = time.perf_counter()
            episodes = self.in_domain_per_task(sampler)
            key = f"{member}:episodes"
            scores[key] = {**summarize(episodes, "success"), "seconds": round(time.perf_counter() - started, 2)}
            roles[key] = "episodes"
            rows += [
                {"member": key, "task_id": t.id, "reward": r, "metric": "success"}
                for t, r in zip(self.curve_tasks(), episodes)
            ]
        if self.curve_metric == "turns" and ev.likelihood:
            started = time.perf_counter()
            scored = point.get("likelihood") or self.likelihood_scores(sampler)  # measured with turn accuracy
            for name in ("p_credited", "p_legal"):  # not `metric`: the in-domain metric is read again below
                key = f"{member}:{name}"
                scores[key] = {**summarize(scored[name], name), "seconds": round(time.perf_counter() - started, 2)}
                roles[key] = "likelihood"
                rows += [
                    {"member": key, "task_id": t, "reward": r, "metric": name}
                    for t, r in zip(scored["task_ids"], scored[name])
                ]
        if curve.max_turns:
            for key in scores:
                if key.endswith(":episodes") or metric == "success":
                    scores[key]["max_turns"] = curve.max_turns
        result["scores"] = {**scores, **result["scores"]}
        result["role"] = {**roles, **result["role"]}
        result["averages"] = role_averages(result["scores"], result["role"])
        ood_items = self.layout.items(part)
        write_jsonl(self.layout.items(out), rows + (read_jsonl(ood_items) if ood_items.exists() else []))
        write_json(out, result)
        return result


def return_freed_memory() -> None:
    """Give the memory freed so far back to the operating system, where the C library can (glibc's
    ``malloc_trim``; elsewhere nothing). The allocator otherwise keeps what a finished stage's engine and
    trainers freed: after the pivot stage of paper.yaml's design at CPU scale (``sampler: vllm``) the process
    held 8.8 GB before the trim and 3.3 GB after, and a later stage's engine can find too little free memory
    for its KV cache."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim(0)
