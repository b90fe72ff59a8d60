"""Judge verdicts per second for the bundled model on hf and on vLLM, each cold (every verdict asks the model)
and from the cache (the same verdicts again), as ratios against hf cold measured in the same run.

The work: ``--states`` expert states of ``--env``, at each every candidate the env offers there (its legal
actions, as in ``pivotgym calibrate``), all judged as one batch per state (``JudgeVerifier.verify_batch``, the
path profiling and training take). vLLM runs as a server from ``.venv-vllm`` (``make vllm``) reached through the
OpenAI client; its start-up is reported apart, not in the rate. A backend that cannot run here is reported as
skipped.

    python benchmarks/judge_speed.py                     # hf and vLLM, 6 states (~4 min on 2 cores)
    python benchmarks/judge_speed.py --no-vllm --states 3 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from _smoke import parse_args, smoke, tiny_model

from pivotgym.calibration import env_candidates
from pivotgym.registry import get_registry
from pivotgym.verify import JudgeVerifier, VerifyContext


def work(env_id: str, states: int) -> list[tuple[VerifyContext, list[str]]]:
    """``states`` expert states of ``env_id`` with the env's own candidates at each."""
    env = get_registry().make(env_id)
    out = []
    for trajectory in env.expert_trajectories("test", limit=states):
        for turn in trajectory.turns():
            if len(out) >= states:
                return out
            context = VerifyContext.from_trajectory(trajectory, turn.turn)
            out.append((context, [c.text for c in env_candidates(context.env(), turn.expert)]))
    return out


def rate(judge: JudgeVerifier, states: list[tuple[VerifyContext, list[str]]]) -> dict[str, float]:
    """Verdicts per second over every state's batch, and the share decided."""
    start = time.perf_counter()
    verdicts = [v for context, texts in states for v in judge.verify_batch(context, texts)]
    seconds = time.perf_counter() - start
    return {
        "verdicts": len(verdicts),
        "seconds": round(seconds, 3),
        "per_s": round(len(verdicts) / seconds, 3),
        "decided": round(sum(v.decided for v in verdicts) / len(verdicts), 3),
    }


def measure(env_id: str, states: int, model: str, vllm: bool, why_not: str = "--no-vllm") -> dict[str, Any]:
    from pivotgym.registry import make_sampler

    chosen = work(env_id, states)
    out: dict[str, Any] = {"env": env_id, "model": model, "states": len(chosen)}
    engine = make_sampler("hf", model)
    JudgeVerifier(model=model, engine=engine).verify(chosen[0][0], chosen[0][1][0])  # warm-up, outside the timings
    judge = JudgeVerifier(model=model, engine=engine)  # a judge of its own: an empty cache
    out["hf"] = {"cold": rate(judge, chosen), "cached": rate(judge, chosen)}
    if not vllm:
        out["vllm"] = {"skipped": why_not}
    else:
        from pivotgym.sampling.openai import OpenAISampler
        from pivotgym.sampling.vllm import VLLMServer, find_vllm_python

        if find_vllm_python() is None:
            out["vllm"] = {"skipped": "no vLLM interpreter (make vllm, or $PIVOTGYM_VLLM_PYTHON)"}
        else:
            start = time.perf_counter()
            with VLLMServer(model) as server:
                started = time.perf_counter() - start
                client = OpenAISampler.for_server(server, concurrency=16)
                JudgeVerifier(model=model, engine=client).verify(chosen[0][0], chosen[0][1][0])
                served = JudgeVerifier(model=model, engine=client)
                out["vllm"] = {
                    "start_s": round(started, 1),
                    "cold": rate(served, chosen),
                    "cached": rate(served, chosen),
                }
    base = out["hf"]["cold"]["per_s"]
    out["ratios_vs_hf_cold"] = {
        f"{backend} {mode}": round(out[backend][mode]["per_s"] / base, 2)
        for backend in ("hf", "vllm")
        for mode in ("cold", "cached")
        if mode in out[backend]
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="planning/gripper-v0")
    parser.add_argument("--states", type=int, default=6)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--no-vllm", dest="vllm", action="store_false")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, argv, states=1, model=tiny_model, vllm=False)
    result = measure(
        args.env, args.states, args.model, args.vllm and not smoke(), "smoke mode" if smoke() else "--no-vllm"
    )
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"judge {result['model']} on {result['env']}: {result['states']} states, every candidate judged")
    for backend in ("hf", "vllm"):
        info = result[backend]
        if "skipped" in info:
            print(f"  {backend}: skipped: {info['skipped']}")
            continue
        extra = f" (server start {info['start_s']} s, not counted)" if "start_s" in info else ""
        print(
            f"  {backend}: cold {info['cold']['per_s']} verdicts/s ({info['cold']['verdicts']} in "
            f"{info['cold']['seconds']} s, {info['cold']['decided']:.0%} decided), "
            f"cached {info['cached']['per_s']}/s{extra}"
        )
    print("ratios vs hf cold: " + ", ".join(f"{k} {v}x" for k, v in result["ratios_vs_hf_cold"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
