#!/usr/bin/env python3
"""A data step in the shape of speculators' `scripts/data_generation_offline.py` (written
here, not copied): speculators imported at module level, an argument parser whose
`--tensor-parallel-size` defaults to `torch.accelerator.device_count()`, a loop over a
dataset in batches, one `data_{i}.pt` per sample saved by writer threads, and a
`data_config.json` from speculators' own `DataGenerationConfig`.

The module-level imports are the point: vLLM's CPU workers are spawned, and spawn
re-imports this module in each worker before vLLM loads anything of its own.

    spec-compat run tests/e2e/datagen_script.py --target-model-path MODEL \\
        --train-data-path samples.jsonl --output-dir out --tensor-parallel-size 1

`--train-data-path`: JSON lines, each {"input_ids": [...], "loss_mask": [...]} (the
upstream script tokenizes a chat dataset into the same two columns first).
"""

import argparse
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from speculators.data_generation.config_generator import DataGenerationConfig
from speculators.data_generation.logging_utils import PipelineLogger
from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

WRITER_THREADS = 4
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
log = PipelineLogger(__name__)


def argument_parser(
    tensor_parallel_default: int, max_model_len: bool = True
) -> argparse.ArgumentParser:
    """`max_model_len`: the upstream script's `--max-model-len` of before speculators PR #198
    (after it, `--seq-length` sizes the model too)."""
    parser = argparse.ArgumentParser(description="hidden states for EAGLE-3 training, offline")
    parser.add_argument("--target-model-path", required=True)
    parser.add_argument("--tensor-parallel-size", type=int, default=tensor_parallel_default)
    if max_model_len:
        parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    parser.add_argument("--train-data-path", required=True)
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--layer-ids", type=int, nargs="+", default=None)
    parser.add_argument("--batch-size", type=int, default=8)
    return parser


def load_samples(path: str, limit: int | None) -> list[dict]:
    with open(path) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    return samples[:limit] if limit is not None else samples


def save(sample: dict, path: Path) -> Path:
    torch.save(sample, path)
    return path


def build_generator(args: argparse.Namespace) -> VllmHiddenStatesGenerator:
    return VllmHiddenStatesGenerator(
        model_path=args.target_model_path,
        layer_ids=args.layer_ids,
        # after speculators PR #198 the script sizes the model by its --seq-length
        max_model_len=getattr(args, "max_model_len", None) or args.seq_length,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
    )


def record(sample: dict, result: dict) -> dict:
    """What one data_{i}.pt holds."""
    kept = len(result["input_ids"])  # the generator may cut a long prompt
    return {
        "input_ids": torch.as_tensor(result["input_ids"], dtype=torch.long),
        "hidden_states": [h.contiguous() for h in result["hidden_states"]],
        # a list from JSON lines, or (datagen_upstream_script.py) the dataset's long tensor,
        # kept as the upstream script keeps it: a view of the row
        "loss_mask": torch.as_tensor(sample["loss_mask"][:kept], dtype=torch.long),
    }


def write_config(
    generator, args: argparse.Namespace, out: Path, num_samples: int, **fields: Any
) -> None:
    """`fields`: DataGenerationConfig.from_generator's own (seq_length, cache_dir, seed) where
    a script records them otherwise."""
    defaults = {"seq_length": getattr(args, "max_model_len", None), "cache_dir": str(out)}
    config = DataGenerationConfig.from_generator(
        generator=generator,
        train_data_path=args.train_data_path,
        num_samples=num_samples,
        max_samples=args.max_samples,
        **(defaults | fields),
    )
    (out / "data_config.json").write_text(json.dumps(config.to_dict(), indent=2))


def main() -> None:
    args = argument_parser(torch.accelerator.device_count()).parse_args()
    samples = load_samples(args.train_data_path, args.max_samples)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    log.section("hidden states")
    generator = build_generator(args)
    index = 0
    with ThreadPoolExecutor(max_workers=WRITER_THREADS) as writers:
        pending = []
        for start in range(0, len(samples), args.batch_size):
            batch = samples[start : start + args.batch_size]
            results = generator.generate([s["input_ids"] for s in batch])
            for sample, result in zip(batch, results, strict=True):
                saved = record(sample, result)
                pending.append(writers.submit(save, saved, out / f"data_{index}.pt"))
                index += 1
        for future in pending:
            future.result()
    write_config(generator, args, out, len(samples))
    log.info(f"saved {index} samples to {out}")


if __name__ == "__main__":
    main()
