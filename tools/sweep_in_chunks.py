"""Run the architecture sweep in chunks, resumably: each chunk is one pytest run of
`tests/e2e/test_architectures.py` with `SPEC_COMPAT_SWEEP_ONLY`, merging its outcomes into
one record folder; a chunk whose classes all have outcomes there is skipped.  A crash or a
kill (a model that takes the machine out of memory) then costs one chunk, not the sweep.

    .venvs/vllm-0.32.0-vision/bin/python tools/sweep_in_chunks.py RECORD_DIR [--size 10]
    python tools/compat_report.py --sweep RECORD_DIR --complete

Chunks follow the sweep's kinds (one extractor process per kind and line in each), the
issue's families first: hybrid, then wrappers, MLA, seeded, plain.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from e2e import sweep  # noqa: E402

ORDER = ("hybrid", "wrapper", "mla", "seeded", "plain")


def chunks(size: int) -> list[list[str]]:
    """The runnable candidates, grouped by kind in ORDER, `size` at a time."""
    runnable = [c for c in sweep.eagle3_architectures() if not c.blocker]
    rank = {c.architecture: next(i for i, k in enumerate(ORDER) if k in c.kind or k == "plain")
            for c in runnable}  # fmt: skip
    ordered = sorted(runnable, key=lambda c: (rank[c.architecture], c.kind, c.architecture))
    names = [c.architecture for c in ordered]
    return [names[i : i + size] for i in range(0, len(names), size)]


def recorded(record: Path) -> set[str]:
    """Classes with an outcome on every line in `record`."""
    lines = [
        {r["architecture"] for r in json.loads(path.read_text())}
        for path in record.glob("sweep-*.json")
    ]
    return set.intersection(*lines) if len(lines) == 2 else set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--size", type=int, default=10)
    args = parser.parse_args()
    env = os.environ | {"SPEC_COMPAT_SWEEP": "all", "SPEC_COMPAT_SWEEP_RECORD": str(args.record)}
    for i, chunk in enumerate(chunks(args.size), 1):
        if set(chunk) <= recorded(args.record):
            continue
        started = time.monotonic()
        log = args.record / f"chunk-{i}.log"
        args.record.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            code = subprocess.call(
                [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-rs",
                 "tests/e2e/test_architectures.py"],
                cwd=ROOT, env=env | {"SPEC_COMPAT_SWEEP_ONLY": ",".join(chunk)},
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        minutes = (time.monotonic() - started) / 60
        print(f"chunk {i}: {len(chunk)} classes, exit {code}, {minutes:.1f} min ({log})")


if __name__ == "__main__":
    main()
