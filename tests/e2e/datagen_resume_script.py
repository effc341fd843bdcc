#!/usr/bin/env python3
"""The output side of speculators' `scripts/data_generation_offline.py` as each line ships
it (written here in its shape, not copied), for the kill-and-resume test: what
`datagen_script.py` leaves out is the part that decides what a killed run leaves behind
(the rest, arguments, records and config, is that script's, imported).

- `find_last_checkpoint`: the highest `data_N.pt` index + 1 (no other check), minus
  `--start-idx`, is where a rerun starts; at or past the end it logs "All samples already
  processed!" and returns before writing anything.
- 4 writer threads (`ThreadPoolExecutor`), waited for with `as_completed` at the end.
- At the very end, 0.4.x only: `sample_lengths.json` = json.dump({file index: len(input_ids)}
  for the samples *this* run wrote, indent=2); then (both lines) `data_config.json`.

    spec-compat run tests/e2e/datagen_resume_script.py --target-model-path MODEL \\
        --train-data-path samples.jsonl --output-dir out --tensor-parallel-size 1
"""

import argparse
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from importlib.metadata import version
from pathlib import Path
from typing import Any

from datagen_script import (
    argument_parser,
    build_generator,
    load_samples,
    log,
    record,
    save,
    write_config,
)

MAX_IO_WORKERS = 4
#: 0.4.x writes sample_lengths.json, 0.3.0 does not
WRITES_LENGTHS = tuple(int(p) for p in version("speculators").split(".")[:2]) >= (0, 4)


def find_last_checkpoint(output_dir: str) -> int:
    highest = -1
    for path in Path(output_dir).iterdir():
        if path.name.startswith("data_") and path.name.endswith(".pt"):
            try:
                highest = max(highest, int(path.stem[5:]))
            except ValueError:
                continue
    return highest + 1


def generate_and_save(args: argparse.Namespace, samples: Sequence, **config: Any) -> None:
    """Everything after the samples are loaded.  `samples[i:j]`: that batch's rows, each
    {"input_ids", "loss_mask"}; `config`: write_config's fields."""
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start_file = find_last_checkpoint(args.output_dir)
    if start_file > 0:
        log.subsection(f"Resuming: {start_file} files already exist")
    start = start_file - args.start_idx
    if start >= len(samples):
        log.info("All samples already processed!")
        return
    generator = build_generator(args)
    file_index, lengths = start_file, {}
    with ThreadPoolExecutor(max_workers=MAX_IO_WORKERS) as writers:
        futures = []
        for i in range(start, len(samples), args.batch_size):
            batch = samples[i : i + args.batch_size]
            results = generator.generate([s["input_ids"] for s in batch])
            for sample, result in zip(batch, results, strict=True):
                saved = record(sample, result)
                lengths[file_index] = len(saved["input_ids"])
                futures.append(writers.submit(save, saved, out / f"data_{file_index}.pt"))
                file_index += 1
        for future in as_completed(futures):
            future.result()
    if WRITES_LENGTHS:
        with open(out / "sample_lengths.json", "w") as f:
            json.dump(lengths, f, indent=2)
    write_config(generator, args, out, len(samples), **config)
    log.info(f"saved {file_index - start_file} samples to {out}")


def main() -> None:
    parser = argument_parser(tensor_parallel_default=1)
    parser.add_argument("--start-idx", type=int, default=0)
    args = parser.parse_args()
    generate_and_save(args, load_samples(args.train_data_path, args.max_samples))


if __name__ == "__main__":
    main()
