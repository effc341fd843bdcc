"""`python -m spec_compat rehearse` on every shipped example, for each speculators line.

    .venvs/vllm-0.32.0/bin/python benchmarks/rehearse.py [--lines DIR ...] [EXAMPLE ...]

Each rehearsal runs in a fresh process, one at a time, as a user would start it.  Prints a
row per (example, line): the outcome, the wall time, its ratio to the 90-second goal,
and where the time went (vLLM import and route, the copy, the extractor, the
reference).  The wall time includes the interpreter start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from spec_compat.rehearse.command import examples

GOAL_SECONDS = 90
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", default=examples())
    lines = sorted(str(p) for p in (ROOT / ".venvs").glob("speculators-*"))
    parser.add_argument("--lines", nargs="+", default=lines, help="speculators --target dirs")
    parser.add_argument("--max-model-len", default="2048")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_COMPAT_PATCHES")}
    print(f"{'example':<16} {'line':<9} {'exit':>4} {'wall s':>7} {'/ goal':>6}  steps (s)")
    for example in args.examples:
        for line in args.lines:
            started = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "spec_compat", "rehearse", example, "--json",
                 "--max-model-len", args.max_model_len],
                env=env | {"PYTHONPATH": line, "HF_HUB_OFFLINE": "1"},
                capture_output=True,
                text=True,
            )  # fmt: skip
            wall = time.perf_counter() - started
            report = json.loads(proc.stdout)
            steps = " ".join(f"{s['name']}={s['seconds']:.0f}" for s in report["steps"])
            print(
                f"{example:<16} {report['speculators'] or '?':<9} {proc.returncode:>4} "
                f"{wall:7.0f} {wall / GOAL_SECONDS:6.2f}  {steps}"
                + (f"  [{report['error']}]" if report["error"] else "")
            )


if __name__ == "__main__":
    main()
