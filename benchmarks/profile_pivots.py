"""Profiling throughput: fixed K vs adaptive K on a real model, with the agreement of the selected pivots.

Four runs over the same states (expert trajectories of ``--env``), same reference model and seed:

* ``per-state``    - K samples per state, one sampler call per state (no batching across states);
* ``fixed``        - K samples per state, the states of a chunk batched into one call (the default);
* ``fixed-stream`` - K samples per state in blocks of ``--block`` (the exact sample stream adaptive K reads);
* ``adaptive``     - blocks of ``--block`` until the pivot decision is settled (:class:`AdaptiveK`).

Printed: states/s and samples of each run, the speed-up of batching states (fixed / per-state), the sample
ratio fixed/adaptive (goal >= 2x), and the agreement of
the pivot sets (var > 0 and mean < λ): per-state agreement and the Jaccard overlap, against the same stream
(differences come only from the unanimity rule) and against the one-call baseline (which also includes
sampling noise; the fixed-vs-fixed-stream line shows that noise floor).

    python benchmarks/profile_pivots.py                        # SmolLM2-135M on CPU, arith + BFCL simple states
    python benchmarks/profile_pivots.py --states 200 --k 16    # larger (e.g. on a GPU machine)
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _smoke import parse_args, tiny_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ARITH = ROOT / "tests" / "plugins" / "pivotgym-arith"


def _ensure_arith(envs: list[str]) -> None:
    """The arith env lives in a test plugin; install it into a temporary site when asked for and missing."""
    if not any(e.startswith("arith/") for e in envs):
        return
    from pivotgym.registry import get_registry, reset_registry

    if "arith/chain-v0" in get_registry().envs:
        return
    site = Path(tempfile.mkdtemp(prefix="pivotgym-bench-site-"))
    atexit.register(shutil.rmtree, site, True)  # removed when the process ends
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(ARITH),
        ],
        check=True,
    )
    sys.path.insert(0, str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    importlib.invalidate_caches()
    reset_registry()


def _trajectories(envs: list[str], states: int) -> list:
    from pivotgym.registry import make

    per_env = max(1, states // len(envs))
    out = []
    for env_id in envs:
        env = make(env_id)
        count = 0
        for trajectory in env.expert_trajectories("train"):
            take = min(len(trajectory.turns()), per_env - count)
            if take <= 0:
                break
            if take < len(trajectory.turns()):  # keep whole states: cut the trajectory after `take` turns
                cut = trajectory.assistant_turns()[take - 1] + 1
                trajectory.messages = trajectory.messages[:cut]
            out.append(trajectory)
            count += take
    return out


def _pivots(profiles: list, lam: float) -> dict[tuple[str, int], bool]:
    return {(p.trajectory_id, p.turn): bool(p.var > 0 and p.mean < lam) for p in profiles}


def _agreement(a: dict, b: dict) -> dict[str, float]:
    same = sum(a[s] == b[s] for s in a) / len(a)
    pa, pb = {s for s, v in a.items() if v}, {s for s, v in b.items() if v}
    jaccard = len(pa & pb) / len(pa | pb) if pa | pb else 1.0
    return {"state_agreement": round(same, 4), "pivot_jaccard": round(jaccard, 4)}


class OneCallPerState:
    """A sampler without per-prompt seeds: the profiler falls back to one call per state (the baseline)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner

    def sample(self, prompts, n=1, params=None):
        return self.inner.sample(prompts, n=n, params=params)

    def describe(self) -> dict:
        return self.inner.describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", action="append", help="env ids (default: arith/chain-v0, tooluse/bfcl-simple-v0)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--states", type=int, default=24)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--block", type=int, default=2)
    parser.add_argument("--min-unanimous", type=int, default=None, help="default: derived from the error bound")
    parser.add_argument("--max-mean", type=float, default=0.6)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--executor", default="process")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parse_args(
        parser,
        model=tiny_model,
        env=["arith/chain-v0"],
        states=2,
        k=4,
        max_new_tokens=4,
        executor="serial",
    )
    envs = args.env or ["arith/chain-v0", "tooluse/bfcl-simple-v0"]

    _ensure_arith(envs)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from pivotgym.execution import make_executor
    from pivotgym.pivot import AdaptiveK, ProfileConfig, Profiler
    from pivotgym.registry import make_sampler
    from pivotgym.sampling.base import SamplingParams

    trajectories = _trajectories(envs, args.states)
    sampler = make_sampler("hf", args.model)
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    runs = {
        "per-state": ProfileConfig(k=args.k, params=params, block=args.k),
        "fixed": ProfileConfig(k=args.k, params=params, block=args.k),
        "fixed-stream": ProfileConfig(k=args.k, params=params, block=args.block),
        "adaptive": ProfileConfig(
            k=args.k,
            params=params,
            adaptive=AdaptiveK(max_mean=args.max_mean, min_unanimous=args.min_unanimous, block=args.block),
        ),
    }
    figures: dict[str, dict] = {}
    decisions = {}
    with make_executor(args.executor) as pool:
        pool.map(abs, [0])  # start the workers before timing
        for name, config in runs.items():
            config.pivot_max_mean = args.max_mean
            start = time.perf_counter()
            reference = OneCallPerState(sampler) if name == "per-state" else sampler
            result = Profiler(reference, config, pool).profile(trajectories, None, progress=False)
            elapsed = time.perf_counter() - start
            n = len(result.profiles)
            figures[name] = {
                "states": n,
                "samples": result.stats["samples"],
                "seconds": round(elapsed, 2),
                "states_per_s": round(n / elapsed, 3),
                "pivots": result.stats["pivots"],
                "uninformative": sum(p.var == 0 for p in result.profiles),
            }
            decisions[name] = _pivots(result.profiles, args.max_mean)
            print(f"# {name}: {figures[name]}", file=sys.stderr, flush=True)
    fixed, adaptive = figures["fixed"], figures["adaptive"]
    summary = {
        "model": sampler.describe(),
        "envs": envs,
        "k": args.k,
        "block": args.block,
        "min_unanimous": args.min_unanimous,
        "runs": figures,
        "batching_speedup_fixed_over_per_state": round(fixed["states_per_s"] / figures["per-state"]["states_per_s"], 3),
        "sample_ratio_fixed_over_adaptive": round(fixed["samples"] / max(1, adaptive["samples"]), 3),
        "speedup_states_per_s": round(adaptive["states_per_s"] / fixed["states_per_s"], 3),
        "agreement_same_stream": _agreement(decisions["fixed-stream"], decisions["adaptive"]),
        "agreement_vs_one_call_fixed": _agreement(decisions["fixed"], decisions["adaptive"]),
        "noise_floor_fixed_vs_fixed_stream": _agreement(decisions["fixed"], decisions["fixed-stream"]),
    }
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return
    print(
        f"model {summary['model'].get('model')} on {summary['model'].get('device')}; envs {', '.join(envs)}; "
        f"K={args.k}, block={args.block}, min_unanimous={args.min_unanimous}"
    )
    for name, f in figures.items():
        print(
            f"  {name:13} {f['states']:4d} states  {f['samples']:5d} samples  {f['seconds']:8.2f}s  "
            f"{f['states_per_s']:7.3f} states/s  pivots {f['pivots']}  uninformative {f['uninformative']}"
        )
    print(
        f"batching states into one call: {summary['batching_speedup_fixed_over_per_state']}x states/s "
        "(fixed / per-state)"
    )
    print(
        f"samples fixed/adaptive: {summary['sample_ratio_fixed_over_adaptive']}x (goal >= 2x); "
        f"states/s adaptive/fixed: {summary['speedup_states_per_s']}x"
    )
    for label in ("agreement_same_stream", "agreement_vs_one_call_fixed", "noise_floor_fixed_vs_fixed_stream"):
        a = summary[label]
        print(f"{label}: {a['state_agreement']:.1%} of states, pivot-set Jaccard {a['pivot_jaccard']:.1%}")


if __name__ == "__main__":
    main()
