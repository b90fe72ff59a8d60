"""Sampling engines side by side: the transformers sampler vs in-process vLLM vs a vLLM server, in one run.

Two workloads on the bundled model (default SmolLM2-135M) and the test split of ``--env`` (default blocks):

* **profiling**: every state of the expert trajectories, K samples each (T=1, ``--profile-tokens`` new tokens,
  one seed per state), all states in one :func:`~pivotgym.sampling.base.sample_seeded` call: the profiler's
  sampling. A vLLM server gets one request per state, ``concurrency`` at a time;
* **episodes**: multi-turn episodes (:func:`~pivotgym.rollout.run_episodes`, ``--episodes`` per task, T=1,
  seeded, up to ``--max-turns`` turns): each turn's prompt extends the previous one, which vLLM's prefix cache
  reuses.

Each engine warms up on one short call first; vLLM's prefix cache is reset before each timed workload (the
server runs with ``VLLM_SERVER_DEV_MODE=1`` for its ``/reset_prefix_cache``). Every backend runs with its own
defaults (vLLM on the CPU: fp32, eager, no chunked prefill, 2 GiB KV cache), and vLLM its own thread count
(on 2 cores it runs its engine on one thread and keeps the other for its front end; ``--vllm-threads`` sets
OMP_NUM_THREADS). Printed: states/s of each engine and its ratio to the transformers sampler, measured in the
same run.

    python benchmarks/sampling_engines.py              # needs a vLLM interpreter: `make vllm` (.venv-vllm)
    python benchmarks/sampling_engines.py --json

In-process vLLM runs in the vLLM venv (``$PIVOTGYM_VLLM_PYTHON`` or .venv-vllm), as this same script with
``--worker``; the server is started from there too; the transformers sampler runs here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _smoke import parse_args, smoke, tiny_model

ROOT = Path(__file__).resolve().parent.parent


def profiling_prompts(env_id: str, split: str, limit: int | None) -> list[Any]:
    """The chat prompt of every state of ``env_id``'s expert trajectories (as the profiler builds them)."""
    from pivotgym.registry import make

    env = make(env_id)
    prompts = [env.prompt_messages(turn.prefix) for t in env.expert_trajectories(split) for turn in t.turns()]
    return prompts[:limit] if limit else prompts


def episode_tasks(env_id: str, split: str) -> list[str]:
    from pivotgym.registry import make

    return [t.task_id for t in make(env_id).expert_trajectories(split)]


def reset_cache(sampler: Any) -> None:
    """Empty vLLM's prefix cache (in-process engine or server), so each workload starts cold."""
    llm = getattr(sampler, "llm", None)
    if llm is not None:
        llm.reset_prefix_cache()
    elif getattr(sampler, "backend", "") == "openai":
        sampler.client.post(sampler._root_url() + "/reset_prefix_cache").raise_for_status()


def run_workloads(sampler: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, then time both workloads on ``sampler``; returns seconds, states and tokens of each."""
    from pivotgym.sampling.base import SamplingParams, sample_seeded

    prompts = profiling_prompts(args.env, args.split, args.states)
    warm = SamplingParams(temperature=1.0, max_new_tokens=4)
    sample_seeded(sampler, prompts[:2], 2, warm, [0, 1])
    out: dict[str, Any] = {"describe": sampler.describe()}
    if "profiling" in args.workloads:
        out["profiling"] = profiling(sampler, prompts, args)
    if "episodes" in args.workloads:
        out["episodes"] = episodes(sampler, args)
    return out


def profiling(sampler: Any, prompts: list[Any], args: argparse.Namespace) -> dict[str, Any]:
    from pivotgym.sampling.base import SamplingParams, sample_seeded

    reset_cache(sampler)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.profile_tokens)
    start = time.perf_counter()
    groups = sample_seeded(sampler, prompts, args.k, params, [1000 + i for i in range(len(prompts))])
    seconds = time.perf_counter() - start
    return {
        "states": len(prompts),
        "samples": sum(len(g) for g in groups),
        "new_tokens": sum(len(c.token_ids) for g in groups for c in g),
        "seconds": round(seconds, 2),
        "states_per_s": round(len(prompts) / seconds, 3),
    }


def episodes(sampler: Any, args: argparse.Namespace) -> dict[str, Any]:
    from functools import partial

    from pivotgym.registry import make
    from pivotgym.rollout import run_episodes
    from pivotgym.sampling.base import SamplingParams

    reset_cache(sampler)
    tasks = episode_tasks(args.env, args.split)
    params = SamplingParams(temperature=1.0, max_new_tokens=args.episode_tokens)
    start = time.perf_counter()
    groups = run_episodes(
        sampler,
        partial(make, args.env),
        tasks,
        params,
        n=args.episodes,
        seeds=lambda task, turn, slot: 7919 * task + 104729 * turn + slot,
        max_turns=args.max_turns,
    )
    seconds = time.perf_counter() - start
    flat = [e for group in groups for e in group]
    states = sum(e.num_turns for e in flat)  # one sampled state per assistant turn
    return {
        "episodes": len(flat),
        "states": states,
        "new_tokens": sum(e.tokens for e in flat),
        "seconds": round(seconds, 2),
        "states_per_s": round(states / seconds, 3),
        "mean_score": round(sum(e.score for e in flat) / max(1, len(flat)), 3),
    }


def worker(args: argparse.Namespace) -> None:
    """In the vLLM venv: the in-process engine with the backend's defaults, both workloads, JSON to ``--out``."""
    from pivotgym.sampling.vllm import VLLMSampler

    start = time.perf_counter()
    sampler = VLLMSampler(args.model, engine_kwargs=json.loads(args.engine_kwargs), warm_prefixes=not args.no_warm)
    started = time.perf_counter() - start
    result = run_workloads(sampler, args)
    result["start_seconds"] = round(started, 1)
    Path(args.out).write_text(json.dumps(result))


def thread_env(threads: int | None) -> dict[str, str]:
    """``OMP_NUM_THREADS`` for the vLLM processes when ``--vllm-threads`` is given (else vLLM's own choice)."""
    return {"OMP_NUM_THREADS": str(threads)} if threads else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="planning/blocks-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--states", type=int, default=None, help="at most this many profiling states (all)")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--profile-tokens", type=int, default=16)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per task")
    parser.add_argument("--episode-tokens", type=int, default=24)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--engines", default="hf,vllm,server", help="comma-separated subset of hf,vllm,server")
    parser.add_argument("--workloads", default="profiling,episodes", help="comma-separated: profiling,episodes")
    parser.add_argument("--engine-kwargs", default="{}", help="JSON: vLLM engine arguments over the defaults")
    parser.add_argument("--vllm-threads", type=int, default=None, help="OMP_NUM_THREADS for vLLM (its own choice)")
    parser.add_argument("--no-warm", action="store_true", help="vLLM: no prefix-cache warm-up (warm_prefixes=False)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parse_args(
        parser,
        model=tiny_model,
        states=2,
        k=2,
        profile_tokens=4,
        episodes=1,
        episode_tokens=4,
        max_turns=1,
        engines="hf",
    )
    if smoke() and args.engines == "hf":
        print("smoke run: the transformers sampler only; vLLM in-process and server skipped (.venv-vllm, minutes)")
    if args.worker:
        worker(args)
        return

    from pivotgym.sampling.vllm import VLLMServer, find_vllm_python

    engines = args.engines.split(",")
    workloads = args.workloads.split(",")
    python = find_vllm_python(ROOT)
    if python is None and set(engines) & {"vllm", "server"}:
        sys.exit("no vLLM interpreter: run `make vllm` (builds .venv-vllm) or set PIVOTGYM_VLLM_PYTHON")
    figures: dict[str, Any] = {}
    if "hf" in engines:
        from pivotgym.sampling.hf import HFSampler

        figures["hf"] = run_workloads(HFSampler(args.model), args)
        print(f"# hf: {figures['hf']}", file=sys.stderr, flush=True)
    env = {**os.environ, **thread_env(args.vllm_threads), "HF_HUB_OFFLINE": "1"}
    if "vllm" in engines:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "vllm.json"
            passed = [a for a in sys.argv[1:] if a != "--json"]
            cmd = [str(python), str(Path(__file__).resolve()), *passed, "--worker", "--out", str(out)]
            run = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"in-process vLLM failed:\n{run.stderr[-4000:]}")
            figures["vllm"] = json.loads(out.read_text())
        print(f"# vllm: {figures['vllm']}", file=sys.stderr, flush=True)
    if "server" in engines:
        from pivotgym.sampling.openai import OpenAISampler

        saved = dict(os.environ)
        os.environ.update({k: v for k, v in env.items() if k in ("OMP_NUM_THREADS", "HF_HUB_OFFLINE")})
        os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # /reset_prefix_cache
        try:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                engine = json.loads(args.engine_kwargs)
                log = Path(tmp) / "server.log"
                with VLLMServer(args.model, python=python, log=log, engine_kwargs=engine) as server:
                    started = time.perf_counter() - start
                    client = OpenAISampler.for_server(server, warm_prefixes=not args.no_warm)
                    figures["server"] = run_workloads(client, args)
                    figures["server"]["start_seconds"] = round(started, 1)
        finally:
            os.environ.clear()
            os.environ.update(saved)
        print(f"# server: {figures['server']}", file=sys.stderr, flush=True)

    summary: dict[str, Any] = {"model": args.model, "env": args.env, "k": args.k, "engines": figures}
    if "hf" in figures:
        for f in figures.values():
            for workload in workloads:
                base = figures["hf"][workload]["states_per_s"]
                f[workload]["ratio_to_hf"] = round(f[workload]["states_per_s"] / base, 2)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return
    print(f"model {args.model}; env {args.env} ({args.split}); K={args.k}, T=1, {args.profile_tokens} new tokens")
    for name, f in figures.items():
        d = f["describe"]
        for workload in workloads:
            w = f[workload]
            ratio = f"  {w['ratio_to_hf']:.2f}x hf" if "ratio_to_hf" in w else ""
            print(
                f"  {name:7} {workload:9} {w['states']:4d} states {w['seconds']:8.2f}s "
                f"{w['states_per_s']:7.3f} states/s{ratio}  ({d.get('backend')}, {d.get('dtype')})"
            )


if __name__ == "__main__":
    main()
