"""Chunks of a data run: the part of the dataset one copy of the unchanged script writes.

The script numbers its files by dataset index and resumes after the highest `data_N.pt` in
its `--output-dir`; it has no end argument.  So chunk [start, end) runs the script with
its own `--output-dir` (the chunk's folder, in the run's workspace beside the final
output, never inside it: speculators' trainer reads every `*pt` below its data folder):

- start: an empty placeholder `data_{start-1}.pt` makes the script's resume begin at
  `start`, writing each sample under its final name;
- end: the `replica_dataset_range` patch hands the script the dataset cut at `end`;
- resume: the script's own, after `repair()` moved what a killed attempt left cut, bad or
  out of order into the workspace's quarantine (`check-data --repair`'s own logic).

Chunk boundaries lie on the script's batch grid, so every `generate()` call sees the
prompts an uninterrupted single run gives it (the condition for bitwise equal states).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from spec_compat.data.dataset import CONFIG, SAMPLE, check
from spec_compat.data.repair import repair as fix
from spec_compat.data.repair import stamp


@dataclass(frozen=True, order=True)
class Chunk:
    start: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.start:09d}-{self.end:09d}"

    def indices(self) -> range:
        return range(self.start, self.end)


def grid(samples: int, batch_size: int, replicas: int, per_replica: int = 3) -> list[Chunk]:
    """About `per_replica` chunks a replica (each chunk restarts vLLM, so few and large),
    every boundary a multiple of `batch_size`, the last chunk ending at `samples`."""
    if samples <= 0:
        return []
    if batch_size <= 0 or replicas <= 0:
        raise ValueError(f"batch size {batch_size} and replicas {replicas} must be positive")
    batches = -(-samples // batch_size)
    size = max(1, -(-batches // (replicas * per_replica))) * batch_size
    return [Chunk(a, min(a + size, samples)) for a in range(0, samples, size)]


def placeholder(folder: Path, chunk: Chunk) -> Path | None:
    return folder / f"data_{chunk.start - 1}.pt" if chunk.start > 0 else None


def written(folder: Path, chunk: Chunk) -> list[int]:
    """The chunk's sample indices present in its folder (placeholder and strays aside)."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        match = SAMPLE.fullmatch(entry.name)
        if match and int(match.group(1)) in chunk.indices():
            found.append(int(match.group(1)))
    return sorted(found)


def repair(folder: Path, chunk: Chunk, quarantine: Path) -> int:
    """Make `folder` a state the script's own resume finishes exactly; returns the index
    the next attempt starts from.  `spec-compat check-data --repair` on the chunk's indices
    (`data.dataset.check(within=)`, `data.repair.repair`): from the first missing, unreadable or
    malformed sample on, every sample moves into a new folder under `quarantine` (nothing is
    deleted); a folder whose samples are all there but whose run did not end (no
    data_config.json) gives up its last sample, or the script would find nothing to do and
    never write the config."""
    folder.mkdir(parents=True, exist_ok=True)
    # values=False: a retry must not read every state of a large chunk; the patched
    # generator refuses NaN/zero states before the script writes them
    report = check(folder, progress=False, within=chunk.indices(), values=False)
    target = quarantine / stamp()
    if fix(report, quiet=True, target=target, lengths=False) is None:
        raise OSError(f"spec_compat: could not quarantine what {folder} holds into {target}")
    resume = chunk.end if report.first_bad is None else report.first_bad
    if resume < chunk.end and (folder / CONFIG).exists():  # that run's end is redone
        target.mkdir(parents=True, exist_ok=True)
        shutil.move(str(folder / CONFIG), str(target / CONFIG))
    if (mark := placeholder(folder, chunk)) is not None and not mark.exists():
        mark.touch()
    return resume
