"""How long `import spec_compat; spec_compat.apply()` takes in a fresh interpreter.

    PYTHONPATH=src:.venvs/speculators-0.4.0.1 .venvs/vllm-0.16.0/bin/python benchmarks/apply_time.py
    .venvs/vllm-0.32.0/bin/python benchmarks/apply_time.py --runs 30

Each of `--runs` fresh subprocesses (this interpreter, this environment) times the import
and the call inside itself (`time.perf_counter`, so interpreter start-up is not counted) and
prints it; the median, minimum and maximum are printed here, and whether spec_compat's
bytecode is cached (without it every run compiles the source it imports).  `--importtime`
also prints the slowest modules of one run (`python -X importtime`, cumulative
microseconds).  The goal is a median of at most 50 ms; this is a measurement,
not a test.  `--baseline SRC` times another source tree of spec_compat (put first on
`PYTHONPATH`) in alternate runs, side by side, and prints the ratio: hosts differ by more
than the goal's margin, a ratio does not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

TIMED = (
    "import time; t = time.perf_counter(); import spec_compat; spec_compat.apply(); "
    "print((time.perf_counter() - t) * 1000)"
)
GOAL_MS = 50.0


def environment(source: str | None = None) -> dict[str, str]:
    """This environment without a parent's selection (a child would apply it at start-up),
    with `source` (a tree holding spec_compat) first on the path."""
    env = {k: v for k, v in os.environ.items() if k != "SPEC_COMPAT_PATCHES"}
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
    return env


def one_run(source: str | None = None) -> float:
    out = subprocess.run(
        [sys.executable, "-c", TIMED], env=environment(source), capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(f"the timed run failed:\n{out.stderr}")
    return float(out.stdout.strip().splitlines()[-1])


def slowest_imports(top: int) -> list[tuple[int, str]]:
    code = "import spec_compat; spec_compat.apply()"
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = (part.strip() for part in line[len("import time:") :].split("|"))
        rows.append((int(cumulative), name))
    return sorted(rows, reverse=True)[:top]


def bytecode() -> str:
    """Whether the runs read spec_compat's cached bytecode or compile its source each time
    (`PYTHONDONTWRITEBYTECODE=1` and no `__pycache__`): compiling is most of the cost."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("spec_compat")  # finds it, imports nothing
    if spec is None or spec.origin is None:
        return "spec_compat not found"
    sources = sorted(Path(spec.origin).parent.rglob("*.py"))
    cached = sum(Path(importlib.util.cache_from_source(str(f))).exists() for f in sources)
    flag = os.environ.get("PYTHONDONTWRITEBYTECODE") or "unset"
    return f"{cached} of {len(sources)} modules cached; PYTHONDONTWRITEBYTECODE {flag}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--importtime", type=int, default=0, metavar="TOP")
    parser.add_argument("--baseline", metavar="SRC", help="another spec_compat source tree")
    args = parser.parse_args()
    one_run()  # warm the file-system cache and .pyc files; not counted
    times, baseline = [], []
    if args.baseline:
        one_run(args.baseline)
    for _ in range(args.runs):  # alternating: both see the same load on the host
        times.append(one_run())
        if args.baseline:
            baseline.append(one_run(args.baseline))
    median = statistics.median(times)
    verdict = "within" if median <= GOAL_MS else "OVER"
    print(f"python: {sys.executable}")
    print(f"PYTHONPATH: {os.environ.get('PYTHONPATH', '-')}")
    print(f"bytecode: {bytecode()}")
    print(
        f"import spec_compat; spec_compat.apply(): median {median:.1f} ms over {args.runs} runs "
        f"(min {min(times):.1f}, max {max(times):.1f}); {verdict} the {GOAL_MS:.0f} ms goal"
    )
    if baseline:
        base = statistics.median(baseline)
        print(
            f"baseline {args.baseline}: median {base:.1f} ms (min {min(baseline):.1f}, max "
            f"{max(baseline):.1f}); this tree / baseline = {median / base:.2f}"
        )
    for cumulative, name in slowest_imports(args.importtime) if args.importtime else []:
        print(f"  {cumulative / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
