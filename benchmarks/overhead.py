"""`import spec_compat; spec_compat.apply()` and `doctor` against a bare interpreter.

    PYTHONPATH=.venvs/speculators-0.3.0 .venvs/vllm-0.16.0/bin/python benchmarks/overhead.py

Each command runs in a fresh interpreter, interleaved, `--runs` times; medians and the
ratio to `python -c pass` measured in the same run are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "bare": [sys.executable, "-c", "pass"],
    "apply": [sys.executable, "-c", "import spec_compat; spec_compat.apply()"],
    "doctor": [sys.executable, "-m", "spec_compat", "doctor", "--json"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "SPEC_COMPAT_PATCHES"}
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, cmd in COMMANDS.items():
            started = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True, check=name != "doctor")
            times[name].append(time.perf_counter() - started)
    bare = statistics.median(times["bare"])
    for name, values in times.items():
        median = statistics.median(values)
        extra = f"  (+{(median - bare) * 1000:.0f} ms over bare)" if name != "bare" else ""
        print(f"{name:<7} median {median * 1000:8.0f} ms  ratio {median / bare:6.1f}{extra}")


if __name__ == "__main__":
    main()
