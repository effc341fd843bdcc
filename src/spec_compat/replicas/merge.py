"""One dataset from the finished chunks, as one run of the script writes it.

Every chunk wrote its samples under their final names (`data_{dataset index}.pt`), so the
merge moves files, renames nothing, and the bytes (torch.save names a file's records after
its stem) are those a single run writes.  Then, in this order, so that a merge cut short
is finished by running it again and `data_config.json` stays the "finished" mark:
`sample_lengths.json` (where the chunks wrote one: speculators 0.4.x) for every index, and
last `data_config.json`: the last chunk's (its `num_samples` is the whole set's already),
with the command a single run would have recorded.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spec_compat.data.dataset import CONFIG, LENGTHS
from spec_compat.data.sample import load
from spec_compat.replicas.chunks import Chunk


class IncompleteRun(RuntimeError):
    """A chunk is not finished: nothing is merged."""


def merge(chunks: Sequence[tuple[Chunk, Path]], output: Path, command: str) -> int:
    """Move every finished chunk's samples into `output` and write its JSON files; returns
    the number of samples.  `chunks`: (chunk, its folder), covering [0, n) in order."""
    ordered = sorted(chunks)
    unfinished = [c.name for c, folder in ordered if not complete(c, folder, output)]
    if unfinished:
        raise IncompleteRun(f"chunks not finished: {', '.join(unfinished)}")
    output.mkdir(parents=True, exist_ok=True)
    lengths: dict[int, int] = {}
    uses_lengths = False
    for chunk, folder in ordered:
        recorded = _read(folder / LENGTHS)
        uses_lengths = uses_lengths or recorded is not None
        lengths.update({int(k): v for k, v in (recorded or {}).items()})
        for index in chunk.indices():
            source = folder / f"data_{index}.pt"
            if source.exists():
                os.replace(source, output / source.name)
    total = ordered[-1][0].end if ordered else 0
    if uses_lengths:
        for index in range(total):
            if index not in lengths:
                lengths[index] = len(load(output / f"data_{index}.pt")["input_ids"])
        text = json.dumps({str(i): lengths[i] for i in range(total)}, indent=2)
        _write(output / LENGTHS, text)
    config = _read(ordered[-1][1] / CONFIG) if ordered else None
    if config is not None:
        config.setdefault("reproducibility", {})["command"] = command
        _write(output / CONFIG, json.dumps(config, indent=2))
    return total


def complete(chunk: Chunk, folder: Path, output: Path) -> bool:
    """The script finished the chunk (its data_config.json is there), and each sample is in
    its folder or, moved by an earlier merge that was cut short, in `output`."""
    return (folder / CONFIG).is_file() and all(
        (folder / f"data_{i}.pt").is_file() or (output / f"data_{i}.pt").is_file()
        for i in chunk.indices()
    )


def _read(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


def _write(path: Path, text: str) -> None:
    """As the script writes its JSON (no trailing newline), through a rename."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
