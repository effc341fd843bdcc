"""`check-data --repair`: make the data script's own resume finish the set exactly.

The script resumes at the highest `data_N.pt` index + 1, so everything from the first bad
or missing index on is moved into a quarantine folder *beside* the set (never deleted;
not inside it, because speculators' trainer walks DIR's subfolders for files ending in
"pt"), stray files too.  `sample_lengths.json` is rewritten from the files kept, where the
line's script writes one (0.4.x); a resumed 0.4.x run overwrites it with only the samples
it wrote itself, so a second `--repair` after the resume completes it.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path
from typing import Any

from spec_compat.data.dataset import LENGTHS, LENGTHS_ONLY, SAMPLE, Report


def stamp() -> str:
    """A quarantine's folder name: when it was made (UTC, to the microsecond)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")


def quarantine_folder(directory: Path) -> Path:
    directory = directory.resolve()
    return directory.parent / f"{directory.name}.quarantine" / stamp()


def _plan(report: Report) -> list[str]:
    first = report.first_bad
    names = list(report.stray)
    if first is not None:
        for entry in report.directory.iterdir():
            match = SAMPLE.fullmatch(entry.name)
            if match and int(match.group(1)) >= first:
                names.append(entry.name)
    return sorted(set(names), key=_order)


def _order(name: str) -> tuple[int, str]:
    match = SAMPLE.fullmatch(name)
    return (int(match.group(1)) if match else -1, name)


def repair(
    report: Report, quiet: bool = False, target: Path | None = None, lengths: bool = True
) -> dict[str, Any] | None:
    """Moves, rewrites, prints what it did; the record of it, or None if a move failed.
    `target`: the quarantine folder (default: a new one beside the set); `lengths`: whether
    sample_lengths.json is rewritten (a replicas merge writes the set's own)."""
    directory, first = report.directory, report.first_bad
    moves = _plan(report)
    lengths_bad = any(p.file == LENGTHS for p in report.problems)
    rewrite = lengths and report.uses_lengths and (first is not None or lengths_bad)
    if not moves and not rewrite:
        if not quiet:
            print(f"{directory}: nothing to repair")
        return {"quarantine": None, "moved": [], "resume_at": None, "lengths_rewritten": False}
    target = target or quarantine_folder(directory)
    target.mkdir(parents=True)
    moved: list[str] = []
    try:
        for name in moves:
            shutil.move(str(directory / name), str(target / name))
            moved.append(name)
        if rewrite and _rewrite_lengths(report, target):
            moved.append(LENGTHS)
    except OSError as error:
        print(f"check-data --repair: {error}; moved so far: {moved} (into {target})")
        return None
    record = {
        "quarantine": str(target),
        "moved": moved,
        "resume_at": first,
        "lengths_rewritten": rewrite,
    }
    if not quiet:
        _say(report, record)
    return record


def _rewrite_lengths(report: Report, target: Path) -> bool:
    """The upstream format: json.dump({index: len(input_ids)}, indent=2), index order;
    whether an old file was moved into the quarantine."""
    first = report.first_bad
    kept = {i: n for i, n in sorted(report.lengths.items()) if first is None or i < first}
    old = report.directory / LENGTHS
    existed = old.exists()
    if existed:
        shutil.move(str(old), str(target / LENGTHS))
    fresh = target / f".{LENGTHS}.new"
    with fresh.open("w") as f:
        json.dump(kept, f, indent=2)
    os.replace(fresh, old)  # same filesystem: the quarantine is a sibling folder
    return existed


def _say(report: Report, record: dict[str, Any]) -> None:
    moved, first = record["moved"], record["resume_at"]
    shown = (
        moved if len(moved) <= 12 else [*moved[:5], f"... {len(moved) - 10} more ...", *moved[-5:]]
    )
    if moved:
        print(f"moved {len(moved)} file(s) into {record['quarantine']}:")
        for name in shown:
            print(f"  {name}")
    if record["lengths_rewritten"]:
        kept = sum(1 for i in report.lengths if first is None or i < first)
        print(f"rewrote {LENGTHS} from the {kept} sample(s) kept")
    if first is not None:
        print(f"the data script's own resume now starts at data_{first}.pt: rerun the same command")
        if report.uses_lengths:
            print(
                f"it writes {LENGTHS} with only the samples it writes: run `spec-compat "
                f"check-data --repair {report.directory}` once more after it"
            )
    elif any(p.what == LENGTHS_ONLY for p in report.problems) or moved:
        print(f"{report.directory}: repaired; nothing to redo")
