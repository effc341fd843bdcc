"""A data script's output directory checked as a set (spec-compat check-data).

speculators' `scripts/data_generation_offline.py` (0.3.0 and 0.4.0.1) writes `data_{i}.pt`
from 4 writer threads, then at the very end `sample_lengths.json` (0.4.x only: {"i": n}
for the samples *this* run wrote) and `data_config.json` (layer_ids, hidden_size,
num_samples).  Its resume starts at the highest index + 1, so holes and cut files below it
stay for good; a killed run has neither JSON file, so the samples are also checked against
each other.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spec_compat.data.sample import Problem, Summary, first_line, judge, load

SAMPLE = re.compile(r"data_(0|[1-9][0-9]*)\.pt")
CONFIG, LENGTHS = "data_config.json", "sample_lengths.json"
#: problems that sample_lengths.json alone has: rewriting it fixes them, no sample moves
LENGTHS_ONLY = "lengths entry"


@dataclass
class Report:
    directory: Path
    files: int = 0
    expected: int | None = None
    config: dict[str, Any] | None = None
    problems: list[Problem] = field(default_factory=list)
    lengths: dict[int, int] = field(default_factory=dict)  # index -> len, good samples
    stray: list[str] = field(default_factory=list)
    max_index: int = -1
    uses_lengths: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def first_bad(self) -> int | None:
        """The index the script's resume must start from for the set to end up whole."""
        bad = [p.index for p in self.problems if p.index is not None and p.what != LENGTHS_ONLY]
        if self.config is None and self.max_index >= 0:
            # without data_config.json the run never finished; a resume that finds every
            # index present returns before writing it, so one sample must be redone
            bad.append(self.max_index)
        return min(bad) if bad else None


def _mode(values: list[Any]) -> Any:
    """The most common value; a tie goes to the one seen first (the lowest index)."""
    return Counter(values).most_common(1)[0][0] if values else None


def _read_json(report: Report, name: str) -> Any:
    path = report.directory / name
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        report.problems.append(Problem(name, "unreadable", "JSON", first_line(error)))
        return None


def _config_expectations(report: Report, config: Any) -> tuple[int | None, int | None]:
    """(layer count, hidden size) from data_config.json; num_samples into the report."""
    try:
        layers = len(config["hidden_states"]["layer_ids"])
        hidden = int(config["model"]["hidden_size"])
        report.expected = int(config["data"]["num_samples"])
    except (KeyError, TypeError, ValueError) as error:
        report.problems.append(
            Problem(CONFIG, "fields", "layer_ids, hidden_size, num_samples", f"missing {error}")
        )
        report.config = None
        return None, None
    report.config = config
    return layers, hidden


def _uses_lengths(report: Report, lengths_present: bool) -> bool:
    """Whether this line's script writes sample_lengths.json (0.4.x does, 0.3.0 does not)."""
    from packaging.version import Version

    if lengths_present:
        return True
    version = (report.config or {}).get("speculators_version")
    if version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as installed

        try:
            version = installed("speculators")
        except PackageNotFoundError:
            return False
    try:
        return Version(str(version)).release[:2] >= (0, 4)
    except ValueError:
        return False


def check(
    directory: Path, progress: bool = True, within: range | None = None, values: bool = True
) -> Report:
    """`within`: only these indices make the set (a replicas chunk's folder: other sample
    files there, such as its start placeholder, are neither judged nor strays); `values`:
    see `sample.judge`."""
    report = Report(directory=directory)
    indices = []
    for entry in sorted(directory.iterdir()):
        match = SAMPLE.fullmatch(entry.name)
        if match and entry.is_file():
            if within is None or int(match.group(1)) in within:
                indices.append(int(match.group(1)))
        elif entry.name not in (CONFIG, LENGTHS) or not entry.is_file():
            # speculators' trainer takes every file ending in "pt" under DIR, subfolders too
            report.stray.append(entry.name)
            report.problems.append(
                Problem(
                    entry.name,
                    "stray",
                    "only data_N.pt and the two JSON files",
                    "folder" if entry.is_dir() else "file",
                )
            )
    indices.sort()
    report.files, report.max_index = len(indices), max(indices, default=-1)
    config = _read_json(report, CONFIG)
    layers, hidden = _config_expectations(report, config) if config is not None else (None, None)
    if config is None and not any(p.file == CONFIG for p in report.problems):
        report.problems.append(
            Problem(CONFIG, "absent", "written when the run ends", "absent: the run did not finish")
        )
    lengths = _read_json(report, LENGTHS)
    if lengths is not None and not (
        isinstance(lengths, dict)
        and all(
            isinstance(k, str) and k.isdecimal() and isinstance(v, int) for k, v in lengths.items()
        )
    ):
        report.problems.append(
            Problem(LENGTHS, "format", '{"index": length}', type(lengths).__name__)
        )
        lengths = {}
    report.uses_lengths = _uses_lengths(report, lengths is not None)
    if lengths is None and report.uses_lengths and report.config is not None:
        report.problems.append(
            Problem(LENGTHS, LENGTHS_ONLY, "written when a 0.4.x run ends", "absent")
        )

    summaries: list[Summary] = []
    for index in _progress(indices, progress):
        path = directory / f"data_{index}.pt"
        try:
            data = load(path)
        except Exception as error:  # a cut file: zip reader, pickle or EOF errors alike
            report.problems.append(
                Problem(
                    f"data_{index}.pt",
                    "unreadable",
                    "a whole torch.save file",
                    f"{path.stat().st_size} bytes: {first_line(error)}",
                    index,
                )
            )
            continue
        summary, problems = judge(index, data, values)
        del data  # one sample in memory at a time
        report.problems.extend(problems)
        if summary is not None:
            summaries.append(summary)
            if not problems:
                report.lengths[index] = summary.length

    _judge_set(report, summaries, layers, hidden, indices, lengths, within)
    report.problems.sort(key=lambda p: (p.index is None, p.index or 0, p.file, p.what))
    return report


def _judge_set(
    report: Report,
    summaries: list[Summary],
    layers: int | None,
    hidden: int | None,
    indices: list[int],
    lengths: dict[str, int] | None,
    within: range | None = None,
) -> None:
    """The samples against data_config.json (where present) and each other; missing
    indices (of `within` where given); sample_lengths.json against the files."""
    expect = {
        "layer count": layers if layers is not None else _mode([s.layers for s in summaries]),
        "hidden size": hidden if hidden is not None else _mode([s.hidden for s in summaries]),
        # data_config's schema always says bfloat16 (documentation, not the run's dtype)
        "dtype": _mode([s.dtype for s in summaries]),
    }
    for s in summaries:
        for what, found in (
            ("layer count", s.layers),
            ("hidden size", s.hidden),
            ("dtype", s.dtype),
        ):
            if found != expect[what]:
                source = "data_config.json" if what != "dtype" and report.config else "the set"
                report.problems.append(
                    Problem(
                        f"data_{s.index}.pt",
                        what,
                        f"{expect[what]} ({source})",
                        str(found),
                        s.index,
                    )
                )
                report.lengths.pop(s.index, None)
    keys = {int(k) for k in lengths} if lengths else set()
    count = (
        report.expected
        if report.expected is not None
        else max([report.max_index, *keys], default=-1) + 1
    )
    present = set(indices)
    for run in _runs(sorted(set(within if within is not None else range(count)) - present)):
        report.problems.append(Problem(_span(run), "missing", "present", "absent", run[0]))
    for index in indices:
        if index >= count:
            report.problems.append(
                Problem(
                    f"data_{index}.pt", "beyond num_samples", f"index < {count}", str(index), index
                )
            )
    if lengths is None:
        return
    absent = [i for i in sorted(report.lengths) if str(i) not in lengths]
    for run in _runs(absent):
        report.problems.append(
            Problem(LENGTHS, LENGTHS_ONLY, f"{_span(run)} listed", "absent", run[0])
        )
    for i, n in sorted(report.lengths.items()):
        if str(i) in lengths and lengths[str(i)] != n:
            report.problems.append(
                Problem(LENGTHS, LENGTHS_ONLY, f'"{i}": {n}', f'"{i}": {lengths[str(i)]}', i)
            )


def _runs(values: list[int]) -> list[list[int]]:
    """Consecutive runs, so 10 000 missing samples are one row, not 10 000."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return runs


def _span(run: list[int]) -> str:
    return f"data_{run[0]}.pt" if len(run) == 1 else f"data_{run[0]}..{run[-1]}.pt ({len(run)})"


def _progress(items: list[int], enabled: bool):
    if not enabled or len(items) < 100:
        return items
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc="check-data", unit="sample", file=sys.stderr, disable=None)
