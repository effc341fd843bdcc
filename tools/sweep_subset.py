"""Run some of the architecture sweep's models in one extractor process, in the given order,
and print each one's outcome as `test_architectures` judges it.

    python tools/sweep_subset.py SPECULATORS_DIR Arch1,Arch2 [--exclude p1,p2] [--kind K]

K is one of `sweep.KINDS` (plain, hybrid, mla), with "+seeded" for a class transformers
lacks and "+wrapper" for a multimodal wrapper: the engine settings of that kind
(`sweep.settings`).

For bisecting a sweep failure without the full sweep: the same prompts, layer ids and
one-process sequence of generators; models are built under /tmp/sweep-subset and reused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e import sweep
from e2e.harness import run_stock
from e2e.test_architectures import PROMPTS, judge


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("speculators_dir", type=Path)
    parser.add_argument("architectures")
    parser.add_argument("--exclude", default="")
    parser.add_argument("--kind", default="plain", help="a KINDS name, +seeded, +wrapper")
    args = parser.parse_args()
    archs = args.architectures.split(",")
    exclude = [name for name in args.exclude.split(",") if name] or None
    built = []
    carriers = {c.architecture: c.carrier for c in sweep.eagle3_architectures()}
    for arch in archs:
        directory = Path("/tmp/sweep-subset") / arch
        if not (directory / "config.json").exists():
            sweep.build(arch, directory, carrier=carriers.get(arch))
        built.append(directory)
    options, backend, alone = sweep.settings(args.kind)
    run = run_stock(
        args.speculators_dir,
        built[0],
        PROMPTS,
        sweep.SWEEP_LAYER_IDS,
        calls=[[i] for i in range(len(PROMPTS))] if alone else None,
        exclude=exclude,
        extra={
            "models": [str(p) for p in built],
            "model_options": options,
            "attention_backend": backend,
            "seeded_weights": sweep.seeded(args.kind),
        },
        timeout=3600,
    )
    assert run.data is not None, run.tail
    for arch, model in zip(archs, built, strict=True):  # judged as test_architectures does
        got = sweep.as_one_call(run.data["sweep"].get(str(model)), alone)
        outcome = judge(arch, "?", "?", model, got, kind=args.kind, source=carriers.get(arch))
        print(outcome, flush=True)


if __name__ == "__main__":
    main()
