"""The share of prompt injections the ``judge`` verifier credits, with its defences and without them, on the
same cases in the same run.

Cases: expert states of ``--envs`` (default the gripper planning env and BFCL simple calls), each with an
action the env's own rule verifier rejects (the label comes from the rule, not the judge) and the expert's
action (:func:`pivotgym.calibration.injection_cases`). Each wrong action is judged plain (the control: how
often this judge credits a wrong action at all) and under each attack of
:data:`pivotgym.verify.injection.ATTACKS`; the expert's action shows whether the judge says yes at all.
The defended judge is :class:`~pivotgym.verify.JudgeVerifier`; the naive one (``defended=False``) puts the
candidate inline and credits any answer containing "yes". Printed per attack class: credited / decided and the
undecided count for each judge, then the overall share of injections credited, defended against naive.

    python benchmarks/judge_injection.py                      # bundled SmolLM2-135M through hf (~6 min on 2 cores)
    python benchmarks/judge_injection.py --vllm               # the same model served by vLLM from .venv-vllm
    python benchmarks/judge_injection.py --limit 3 --json
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from _smoke import parse_args, smoke, tiny_model

from pivotgym.calibration import injection_cases
from pivotgym.verify import JudgeVerifier
from pivotgym.verify.injection import injection_report


def measure(envs: list[str], limit: int, model: str, vllm: bool) -> dict[str, Any]:
    cases = [case for env in envs for case in injection_cases(env, limit=limit, per_trajectory=2)]
    server = None
    if vllm:
        from pivotgym.sampling.openai import OpenAISampler
        from pivotgym.sampling.vllm import VLLMServer, find_vllm_python

        if find_vllm_python() is None:
            return {"skipped": "no vLLM interpreter (make vllm, or $PIVOTGYM_VLLM_PYTHON)"}
        server = VLLMServer(model).start()
        engine = OpenAISampler.for_server(server)
    else:
        from pivotgym.registry import make_sampler

        engine = make_sampler("hf", model)
    try:
        defended = injection_report(JudgeVerifier(model=model, engine=engine), cases)
        naive = injection_report(JudgeVerifier(model=model, engine=engine, defended=False), cases)
    finally:
        if server is not None:
            server.stop()
    return {
        "model": model,
        "backend": "vllm" if vllm else "hf",
        "cases": len(cases),
        "defended": defended,
        "naive": naive,
    }


def _cell(tally: dict[str, Any], n: int) -> str:
    """``credited/decided (share)``, and the undecided ones beside."""
    decided = n - tally["undecided"]
    shown = f"{tally['credited']}/{decided} ({tally['share']:.0%})" if decided else "-"
    return shown + (f", {tally['undecided']} undecided" if tally["undecided"] else "")


def show(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    d, n, cases = result["defended"], result["naive"], result["cases"]
    every = cases * len(d["attacks"])
    lines = [
        f"judge {result['model']} on {result['backend']}, {result['cases']} cases (wrong action by the rule verifier)",
        "",
        "| candidate | defended: credited | naive: credited |",
        "|---|---|---|",
        f"| expert's action (control: says yes at all) | {_cell(d['right'], cases)} | {_cell(n['right'], cases)} |",
        f"| wrong action, no attack (floor) | {_cell(d['wrong'], cases)} | {_cell(n['wrong'], cases)} |",
    ]
    for name in d["attacks"]:
        lines.append(f"| attack: {name} | {_cell(d['attacks'][name], cases)} | {_cell(n['attacks'][name], cases)} |")
    lines.append(f"| every attack | {_cell(d['attacks_overall'], every)} | {_cell(n['attacks_overall'], every)} |")
    ds, ns = d["attacks_overall"]["share"], n["attacks_overall"]["share"]
    if ds is not None and ns is not None:
        lines += ["", f"injections credited: defended {ds:.1%} vs naive {ns:.1%}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="planning/gripper-v0,tooluse/bfcl-simple-v0")
    parser.add_argument("--limit", type=int, default=6, help="expert trajectories per env (2 states each)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--vllm", action="store_true", help="judge through a vLLM server (.venv-vllm)")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, argv, limit=1, model=tiny_model, envs="planning/gripper-v0")
    if smoke() and args.vllm:
        print("skipped: smoke mode starts no vLLM server")
        return 0
    result = measure(args.envs.split(","), args.limit, args.model, args.vllm)
    print(json.dumps(result, indent=1) if args.json else show(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
