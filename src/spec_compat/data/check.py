"""`spec-compat check-data DIR [--json] [--repair]`: checks, one sample at a time, a
directory that speculators' `scripts/data_generation_offline.py` wrote (dataset.py), and
with `--repair` makes the script's own resume finish it exactly (repair.py)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from spec_compat.data.dataset import Report, check


def table(report: Report) -> str:
    rows = [(p.file, p.what, p.expected, p.found) for p in report.problems]
    head = ("file", "what", "expected", "found")
    widths = [max(len(r[c]) for r in [head, *rows]) for c in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [head, *rows]
    ]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def as_json(report: Report) -> dict[str, Any]:
    return {
        "directory": str(report.directory),
        "ok": report.ok,
        "files": report.files,
        "expected": report.expected,
        "first_bad": report.first_bad,
        "problems": [asdict(p) for p in report.problems],
    }


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="spec-compat check-data", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("directory", type=Path)
    parser.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="quarantine from the first bad "
        "or missing index on, so the script's own resume redoes the rest",
    )
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        print(f"check-data: {args.directory} is not a directory", file=sys.stderr)
        return 2
    report = check(args.directory, progress=not args.json)
    if not args.json:
        print(_summary(report, args.repair))
    moved = None
    if args.repair:
        from spec_compat.data.repair import repair

        moved = repair(report, quiet=args.json)
    if args.json:
        extra = {"repair": moved} if moved is not None else {}
        print(json.dumps(as_json(report) | extra, indent=2))
    if args.repair:
        return 0 if moved is not None else 2
    return 0 if report.ok else 1


def _summary(report: Report, repairing: bool) -> str:
    if report.ok:
        return f"{report.directory}: {report.files} samples, whole"
    advice = (
        ""
        if repairing
        else (f"; `spec-compat check-data --repair {report.directory}`, then rerun the data script")
    )
    return (
        f"{table(report)}\n\n{report.directory}: {len(report.problems)} problem(s) in "
        f"{report.files} files{advice}"
    )
