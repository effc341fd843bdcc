"""Chunks of a data run: the part of the dataset one copy of the unchanged script writes.

The script numbers its files by dataset index and resumes after the highest `data_N.pt` in
its `--output-dir`; it has no end argument.  So chunk [start, end) runs the script with
its own `--output-dir` (the chunk's folder, in the run's workspace beside the final
output, never inside it: speculators' trainer reads every `*pt` below its data folder):

- start: an empty placeholder `data_{start-1}.pt` makes the script's resume begin at
  `start`, writing each sample under its final name;
- end: the replica hook (`hook.py`) hands the script the dataset cut at `end`;
- resume: the script's own, after `repair()` moved what a killed attempt left cut or out
  of order into the workspace's quarantine.

Chunk boundaries lie on the script's batch grid, so every `generate()` call sees the
prompts an uninterrupted single run gives it (the condition for bitwise equal states).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from ..data_sample import load
from ..data_set import CONFIG, SAMPLE


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


def done(folder: Path, chunk: Chunk) -> bool:
    """The script finished the chunk: its data_config.json (written after every sample's
    writer returned) and every sample of the chunk are there."""
    return (folder / CONFIG).is_file() and written(folder, chunk) == list(chunk.indices())


def repair(folder: Path, chunk: Chunk, quarantine: Path) -> int:
    """Make `folder` a state the script's own resume finishes exactly; returns the index
    the next attempt starts from.  From the first missing or unreadable sample on, every
    sample moves to `quarantine` (nothing is deleted); a folder whose samples are all there
    but whose run did not end (no data_config.json) gives up its last sample, or the
    script would find nothing to do and never write the config."""
    folder.mkdir(parents=True, exist_ok=True)
    present = set(written(folder, chunk))
    resume = chunk.end
    for index in chunk.indices():
        if index not in present or not _readable(folder / f"data_{index}.pt"):
            resume = index
            break
    if resume == chunk.end and not (folder / CONFIG).is_file() and chunk.end > chunk.start:
        resume = chunk.end - 1
    moved = [i for i in present if i >= resume]
    if moved:
        quarantine.mkdir(parents=True, exist_ok=True)
    for index in moved:
        name = f"data_{index}.pt"
        shutil.move(str(folder / name), str(_free(quarantine / name)))
    if resume < chunk.end and (folder / CONFIG).exists():
        shutil.move(str(folder / CONFIG), str(_free(quarantine / CONFIG)))
    if (mark := placeholder(folder, chunk)) is not None and not mark.exists():
        mark.touch()
    return resume


def _readable(path: Path) -> bool:
    try:
        load(path)
    except Exception:  # a cut file: zip reader, pickle or EOF errors alike
        return False
    return True


def _free(path: Path) -> Path:
    """`path`, or `path.1`, `path.2`... where an earlier attempt's file has the name."""
    candidate, n = path, 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate
