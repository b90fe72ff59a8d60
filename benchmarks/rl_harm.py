"""Does an RL step with these settings hurt the states it does not train on? Real advantages vs the placebo.

PivotRL runs on SmolLM2-135M (bundled) over training states of a single-turn env, each run from the same
start and seed; only the learning rate and ``placebo`` (advantages shuffled within each group: the same
rollouts and step sizes, zero expected signal) change. Each run scores, greedily, states that were profiled
but not selected as pivots (``non_pivot_eval``: the trainer draws them from the profiles minus the pivots,
as in the experiment) before and after training, and logs the weights' drift. Printed per run: non-pivot
pass rate before -> after (delta), the pivots' score delta, RMS drift from the start, mean RMS update per
applied step, steps applied; then, per learning rate, real minus placebo (the effect of the signal) and the
drift ratio placebo/real.

    python benchmarks/rl_harm.py                                   # ~3 min on 2 CPU cores
    python benchmarks/rl_harm.py --lrs 2e-5,5e-6,1e-6 --steps 6 --seeds 0,1
    python benchmarks/rl_harm.py --update-scale full --kl 0.05     # the old full-size steps; with a KL

The training pool is the first ``--train-states`` expert turns of ``--env`` (all of them pivots), the
non-pivot states the next ``--non-pivot`` (the env's own split; arithmetic answers are checked by its
functional verifier). A few steps on one seed are a smoke measurement of the mechanism, not a study: the
non-pivot delta of one run has a binomial standard error of ~sqrt(p(1-p)/N).

Measured (2 shared CPU cores, one seed, 16 non-pivot states starting at 0.500; SE of one delta ~0.125):

    python benchmarks/rl_harm.py                       # update_scale informative_share (the default)
      real    lr=2e-5: non-pivot +0.375, pivots +0.750, drift 1.63e-05, update 6.2e-06/step, 3/3 applied
      placebo lr=2e-5: non-pivot -0.188, pivots +0.250, drift 1.12e-05, update 6.1e-06/step, 2/3 applied
      real    lr=5e-6: non-pivot +0.062, pivots +0.500, drift 2.81e-06, update 1.5e-06/step, 2/3 applied
      placebo lr=5e-6: non-pivot -0.062, pivots +0.000, drift 2.80e-06, update 1.5e-06/step, 2/3 applied
    python benchmarks/rl_harm.py --lrs 2e-5 --update-scale full
      real    lr=2e-5: non-pivot +0.375, pivots +0.750, drift 3.72e-05, update 1.42e-05/step, 3/3 applied
      placebo lr=2e-5: non-pivot -0.188, pivots +0.000, drift 2.76e-05, update 1.54e-05/step, 2/3 applied

Five seeds, the trainer's default lr and half of it (idle cores, ~25 s a run; mean non-pivot change, points):

    python benchmarks/rl_harm.py --lrs 1e-5,5e-6 --seeds 0,1,2,3,4
      lr=1e-5: real +35.0 (every seed +25 to +44), placebo +3.7 (-12.5 to +25)      5 seeds
      lr=5e-6: real +21.9, placebo +0.0                                              4 seeds (disk full)

The placebo broke 3 of 16 non-pivot states at 2e-5 with full-size or share-scaled steps alike (scaling cut
the drift ~2.5x), 1 of 16 at 5e-6; real advantages gained on both sets. A run takes 20-40 s on idle cores
(the four default runs took 1283 s while the machine was shared with other jobs).
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _smoke import parse_args, tiny_model


def write_data(directory: Path, env_id: str, split: str, n_train: int, n_held: int) -> tuple[Path, Path, Path]:
    """Trajectories, a profiles file with ``n_train + n_held`` single-turn states and a pivot set with the
    first ``n_train`` of them (the profiles' rewards are placeholders: the trainer only reads which turns
    were profiled)."""
    from pivotgym.jsonl import write_pivot_set, write_profiles, write_trajectories
    from pivotgym.registry import make
    from pivotgym.types import PivotSet, TurnProfile

    env = make(env_id)
    trajectories = list(env.expert_trajectories(split, limit=n_train + n_held))
    profiles = [
        TurnProfile(t.id, turn, t.env_id, t.task_id, 4, [0.0, 1.0, 0.0, 1.0], 0.5, 1 / 3, [], {}, {}, f"{t.id}:{turn}")
        for t in trajectories
        for turn in range(len(t.assistant_turns()))
    ][: n_train + n_held]
    if len(profiles) < n_train + n_held:
        raise SystemExit(f"{env_id} {split}: only {len(profiles)} expert turns, asked for {n_train + n_held}")
    paths = directory / "expert.jsonl", directory / "profiles.jsonl", directory / "pivots.jsonl"
    write_trajectories(paths[0], trajectories)
    write_profiles(paths[1], profiles)
    write_pivot_set(paths[2], PivotSet({"benchmark": "rl_harm"}, profiles[:n_train]))
    return paths


def run_one(
    args: argparse.Namespace, data: tuple[Path, Path, Path], out: Path, lr: float, placebo: bool, seed: int
) -> dict[str, Any]:
    from pivotgym.jsonl import read_jsonl
    from pivotgym.train import PivotConfig, PivotTrainer

    expert, profiles, pivots = data
    config = PivotConfig(
        model=args.model,
        output_dir=str(out),
        seed=seed,
        steps=args.steps,
        learning_rate=lr,
        pivots=str(pivots),
        trajectories=str(expert),
        profiles=str(profiles),
        group_size=args.group_size,
        pivots_per_step=args.pivots_per_step,
        max_new_tokens=args.max_new_tokens,
        placebo=placebo,
        update_scale=args.update_scale,
        min_informative_groups=args.min_informative_groups,
        kl_coef=args.kl,
        non_pivot_eval=args.non_pivot,
        eval_pivots=args.train_states,
        eval_samples=1,
        eval_temperature=0.0,
        report_to=["jsonl"],
        progress=False,
        resume="never",
        save_final_model=False,
    )
    t0 = time.perf_counter()
    summary = PivotTrainer(config).fit()
    rows = read_jsonl(out / "metrics.jsonl")
    evals = [r for r in rows if r["kind"] == "eval"]
    train = [r for r in rows if r["kind"] == "train"]
    applied = [r for r in train if not r.get("skipped")]
    counters = summary["counters"]
    shutil.rmtree(out / "checkpoints", ignore_errors=True)  # ~1.6 GB each (weights + AdamW); never resumed
    return {
        "lr": lr,
        "placebo": placebo,
        "seed": seed,
        "non_pivot_before": evals[0]["eval_non_pivot_pass"],
        "non_pivot_after": evals[-1]["eval_non_pivot_pass"],
        "non_pivot_delta": evals[-1]["eval_non_pivot_pass"] - evals[0]["eval_non_pivot_pass"],
        "pivot_delta": evals[-1]["eval_score"] - evals[0]["eval_score"],
        "non_pivot_states": evals[-1]["eval_non_pivot_states"],
        "drift_rms": train[-1].get("drift_rms", float("nan")),
        "update_rms": statistics.fmean(r["update_rms"] for r in applied) if applied else 0.0,
        "informative_share": statistics.fmean(r["informative_groups"] for r in train),
        "steps_applied": counters["steps_applied"],
        "steps": counters["steps"],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--env", default="general/arithmetic-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--lrs", default="2e-5,5e-6", help="comma-separated learning rates")
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--pivots-per-step", type=int, default=4)
    parser.add_argument("--train-states", type=int, default=8, help="the pivot pool (scored before/after too)")
    parser.add_argument("--non-pivot", type=int, default=16, help="non-pivot states scored greedily")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--update-scale", default="informative_share", choices=["informative_share", "full"])
    parser.add_argument("--min-informative-groups", type=int, default=1)
    parser.add_argument("--kl", type=float, default=0.0, help="kl_coef (k3 to the frozen start model)")
    parser.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    args = parse_args(
        parser,
        argv,
        model=tiny_model,
        lrs="2e-5",
        steps=1,
        group_size=2,
        pivots_per_step=1,
        train_states=1,
        non_pivot=1,
        max_new_tokens=4,
    )

    import torch

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    lrs = [float(x) for x in args.lrs.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="rl-harm-"))
    if not args.out:
        atexit.register(shutil.rmtree, root, True)  # a temporary folder: gone when the process ends
    root.mkdir(parents=True, exist_ok=True)
    data = write_data(root, args.env, args.split, args.train_states, args.non_pivot)
    results = []
    started = time.perf_counter()
    for seed in seeds:
        for lr in lrs:
            for placebo in (False, True):
                tag = f"{'placebo' if placebo else 'real'}-lr{lr:g}-s{seed}"
                result = run_one(args, data, root / tag, lr, placebo, seed)
                results.append(result)
                print(json.dumps({"run": tag, **result}), flush=True)

    print(
        f"\n{args.env}: {args.steps} steps x {args.pivots_per_step} pivots x G={args.group_size}, "
        f"update_scale={args.update_scale}, kl={args.kl:g}, {len(seeds)} seed(s), "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(
        f"{'run':>22} {'non-pivot before->after':>24} {'delta':>7} {'pivot d':>8} {'drift rms':>10} "
        f"{'update rms':>11} {'inform.':>7} {'applied':>8}"
    )
    for r in results:
        tag = f"{'placebo' if r['placebo'] else 'real'} lr={r['lr']:g} s{r['seed']}"
        print(
            f"{tag:>22} {r['non_pivot_before']:>11.3f} -> {r['non_pivot_after']:<10.3f} {r['non_pivot_delta']:>+7.3f} "
            f"{r['pivot_delta']:>+8.3f} {r['drift_rms']:>10.2e} {r['update_rms']:>11.2e} "
            f"{r['informative_share']:>7.2f} {r['steps_applied']:>4}/{r['steps']}"
        )
    print("\nper lr, mean over seeds: real - placebo (the signal's effect) and drift placebo/real")
    for lr in lrs:
        real = [r for r in results if r["lr"] == lr and not r["placebo"]]
        fake = [r for r in results if r["lr"] == lr and r["placebo"]]
        diff = statistics.fmean(a["non_pivot_delta"] - b["non_pivot_delta"] for a, b in zip(real, fake))
        ratios = [b["drift_rms"] / a["drift_rms"] for a, b in zip(real, fake) if a["drift_rms"]]
        ratio = f"{statistics.fmean(ratios):.2f}" if ratios else "- (no real run moved the weights)"
        harm = statistics.fmean(b["non_pivot_delta"] for b in fake)
        print(
            f"  lr={lr:g}: non-pivot delta real-placebo {diff:+.3f}; placebo's own non-pivot delta "
            f"{harm:+.3f}; drift placebo/real {ratio}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
