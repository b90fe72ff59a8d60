"""The share of prompt injections the ``judge`` verifier credits, with its defences and without them, on the
same cases in the same run.

Cases: expert states of ``--envs`` (default the gripper planning env and BFCL simple calls), each with an
action the env's own rule verifier rejects (the label comes from the rule, not the judge) and the expert's
action (:func:`pivotgym.calibration.injection_cases`). Each wrong action is judged plain (the control: how
often this judge credits a wrong action at all) and under each attack of
:data:`pivotgym.verify.injection.ATTACKS`; the expert's action shows whether the judge says yes at all.
The judges: :class:`~pivotgym.verify.JudgeVerifier` with all its defences, with each one left out in turn
(:data:`pivotgym.verify.llm_judge.DEFENCES`), and with none (the naive judge: the candidate inline, credited
when "yes" appears anywhere in a free answer), all on the same model in the same run. Printed per attack
class and judge: credited / decided and the undecided count; then the overall share of injections credited
by each judge.

    python benchmarks/judge_injection.py                      # bundled SmolLM2-135M through hf (~6 min on 2 cores)
    python benchmarks/judge_injection.py --vllm               # the same model served by vLLM from .venv-vllm
    python benchmarks/judge_injection.py --vllm --generic     # the judge's generic instructions, not the envs' own
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
from pivotgym.verify.llm_judge import DEFAULT_INSTRUCTIONS, DEFENCES


def variants() -> dict[str, tuple[str, ...]]:
    """Judge label -> the defences it keeps: all, each one left out, none."""
    out = {"all defences": DEFENCES}
    out.update({f"without {d}": tuple(x for x in DEFENCES if x != d) for d in DEFENCES})
    out["none (naive)"] = ()
    return out


def measure(envs: list[str], limit: int, model: str, vllm: bool, generic: bool = False) -> dict[str, Any]:
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
    instructions = DEFAULT_INSTRUCTIONS if generic else None  # None: each env's judge_instructions
    try:
        judges = {
            label: injection_report(
                JudgeVerifier(model=model, engine=engine, defences=kept, instructions=instructions), cases
            )
            for label, kept in variants().items()
        }
    finally:
        if server is not None:
            server.stop()
    return {
        "model": model,
        "backend": "vllm" if vllm else "hf",
        "instructions": "generic" if generic else "the envs' own",
        "cases": len(cases),
        "judges": judges,
    }


def _cell(tally: dict[str, Any], n: int) -> str:
    """``credited/decided (share)``, and the undecided ones beside."""
    decided = n - tally["undecided"]
    shown = f"{tally['credited']}/{decided} ({tally['share']:.0%})" if decided else "-"
    return shown + (f", {tally['undecided']} undecided" if tally["undecided"] else "")


def show(result: dict[str, Any]) -> str:
    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    judges, cases = result["judges"], result["cases"]
    labels = list(judges)
    every = cases * len(judges[labels[0]]["attacks"])
    lines = [
        f"judge {result['model']} on {result['backend']}, {result['instructions']} instructions, {cases} cases "
        "(wrong action by the rule verifier)",
        "",
        "| candidate | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
        "| expert's action (control) | " + " | ".join(_cell(judges[j]["right"], cases) for j in labels) + " |",
        "| wrong action, no attack | " + " | ".join(_cell(judges[j]["wrong"], cases) for j in labels) + " |",
    ]
    for name in judges[labels[0]]["attacks"]:
        cells = " | ".join(_cell(judges[j]["attacks"][name], cases) for j in labels)
        lines.append(f"| attack: {name} | {cells} |")
    lines.append("| every attack | " + " | ".join(_cell(judges[j]["attacks_overall"], every) for j in labels) + " |")
    shares = [(j, judges[j]["attacks_overall"]["share"]) for j in labels]
    lines += ["", "injections credited: " + ", ".join(f"{j} {s:.1%}" for j, s in shares if s is not None)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="planning/gripper-v0,tooluse/bfcl-simple-v0")
    parser.add_argument("--limit", type=int, default=6, help="expert trajectories per env (2 states each)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--vllm", action="store_true", help="judge through a vLLM server (.venv-vllm)")
    parser.add_argument("--generic", action="store_true", help="the judge's generic instructions for every env")
    parser.add_argument("--json", action="store_true")
    args = parse_args(parser, argv, limit=1, model=tiny_model, envs="planning/gripper-v0")
    if smoke() and args.vllm:
        print("skipped: smoke mode starts no vLLM server")
        return 0
    result = measure(args.envs.split(","), args.limit, args.model, args.vllm, args.generic)
    print(json.dumps(result, indent=1) if args.json else show(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
