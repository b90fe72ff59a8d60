"""Evaluate two models on a suite and print the retention comparison (what `pivotgym eval` + `compare` do).

    python examples/eval_and_compare.py --base smollm2-135m --trained runs/quickstart/... --limit 20

With ``--tiny`` it uses two random-init tiny models instead (seconds, no weights needed; the numbers are
noise), which is how the test suite exercises this script.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sampler_for(name: str, tiny_seed: int | None):
    from pivotgym.sampling.hf import HFSampler

    if tiny_seed is not None:
        from pivotgym.sampling.testing import tiny_llama

        model, tokenizer = tiny_llama(seed=tiny_seed)
        return HFSampler(model, tokenizer)
    return HFSampler(name)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="capitals-demo")
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--trained", default="smollm2-135m")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("runs/eval-example"))
    parser.add_argument("--tiny", action="store_true", help="random-init tiny models (for tests)")
    args = parser.parse_args(argv)

    # make the example YAML env and suite visible (as a user would with `export PIVOTGYM_ENV_PATH=...`)
    os.environ["PIVOTGYM_ENV_PATH"] = os.pathsep.join(
        filter(None, [str(HERE / "yaml_env"), os.environ.get("PIVOTGYM_ENV_PATH")])
    )
    from pivotgym.eval import compare, evaluate_suite, format_comparison
    from pivotgym.registry import reset_registry

    reset_registry()
    results = []
    for label, name, seed in (("base", args.base, 0), ("trained", args.trained, 1)):
        sampler = sampler_for(name, seed if args.tiny else None)
        results.append(
            evaluate_suite(
                args.suite,
                sampler,
                args.out / f"{label}.json",
                limit=args.limit,
                model=name,
                max_new_tokens=8 if args.tiny else None,
            )
        )
    comparison = compare(*results)
    print(format_comparison(comparison))
    return comparison


if __name__ == "__main__":
    main()
