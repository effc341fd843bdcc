#!/usr/bin/env python3
"""How fast one pass of samples reaches the disk in speculators' data-script format, side by
side in one run: `torch.save` with and without its per-record CRC32, from 1 and 4 writer
threads (`--more-threads`: also 8 and 16), each pass followed by `os.sync()`, against
raw writes of the same bytes.

    python benchmarks/save_speed.py [--dir /tmp/save-speed] [--gb 5.4] [--samples 256]

A sample is {"input_ids", "hidden_states": [4 layers], "loss_mask"} as the 0.4.x script
saves it (hidden 2048, bf16: the 0.95 B Llama pass of BENCHMARKS.md is 5.42 GB in 256 samples).
Prints one JSON line per variant and the ratios to the stock variant (CRC on, 4 threads).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

HIDDEN, LAYERS = 2048, 4


def samples(total_bytes: float, count: int) -> list[dict]:
    tokens = int(total_bytes / (count * LAYERS * HIDDEN * 2))
    return [
        {
            "input_ids": torch.arange(tokens),
            "hidden_states": [
                torch.randn(tokens, HIDDEN, dtype=torch.bfloat16) for _ in range(LAYERS)
            ],
            "loss_mask": torch.ones(tokens, dtype=torch.long),
        }
        for _ in range(count)
    ]


def raw_write(sample: dict, path: Path) -> None:
    with path.open("wb") as fh:
        for tensor in (sample["input_ids"], *sample["hidden_states"], sample["loss_mask"]):
            fh.write(memoryview(tensor.contiguous().view(torch.uint8).numpy()))


def one_pass(data: list[dict], folder: Path, threads: int, crc: bool | None) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.sync()
    if crc is not None:
        torch.serialization.set_crc32_options(crc)

    def save(index: int) -> None:
        path = folder / f"data_{index}.pt"
        if crc is None:
            raw_write(data[index], path)
        else:
            torch.save(data[index], path)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(save, range(len(data))))
    os.sync()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default="/tmp/save-speed")
    parser.add_argument("--gb", type=float, default=5.42)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--more-threads", action="store_true", help="also 8 and 16 writer threads (the floor?)"
    )
    args = parser.parse_args()
    data = samples(args.gb * 1e9, args.samples)
    nbytes = sum(
        t.numel() * t.element_size()
        for s in data
        for t in (s["input_ids"], *s["hidden_states"], s["loss_mask"])
    )
    variants = {
        "torch.save, CRC32 (stock), 4 threads": (4, True),
        "torch.save, CRC32 (stock), 1 thread": (1, True),
        "torch.save, no CRC32, 4 threads": (4, False),
        "torch.save, no CRC32, 1 thread": (1, False),
        "raw bytes, 4 threads": (4, None),
    }
    if args.more_threads:
        for threads in (8, 16):
            variants[f"torch.save, CRC32 (stock), {threads} threads"] = (threads, True)
            variants[f"raw bytes, {threads} threads"] = (threads, None)
    best = {}
    for _ in range(args.repeats):
        for name, (threads, crc) in variants.items():
            seconds = one_pass(data, Path(args.dir), threads, crc)
            best[name] = min(best.get(name, seconds), seconds)
    torch.serialization.set_crc32_options(True)
    shutil.rmtree(args.dir, ignore_errors=True)
    stock = best["torch.save, CRC32 (stock), 4 threads"]
    for name, seconds in best.items():
        print(
            json.dumps(
                {
                    "variant": name,
                    "seconds": round(seconds, 3),
                    "GB/s": round(nbytes / seconds / 1e9, 3),
                    "vs_stock": round(stock / seconds, 3),
                }
            )
        )


if __name__ == "__main__":
    main()
