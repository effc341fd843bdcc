#!/usr/bin/env python3
"""The output side of speculators' `scripts/data_generation_offline.py` as each line ships
it (written here in its shape, not copied), for the kill-and-resume test: what
`datagen_script.py` leaves out is the part that decides what a killed run leaves behind.

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
import logging
from concurrent.futures import ThreadPoolExecutor, as_completed
from importlib.metadata import version
from pathlib import Path

import torch
from speculators.data_generation.config_generator import DataGenerationConfig
from speculators.data_generation.logging_utils import PipelineLogger
from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

MAX_IO_WORKERS = 4
#: 0.4.x writes sample_lengths.json, 0.3.0 does not
WRITES_LENGTHS = tuple(int(p) for p in version("speculators").split(".")[:2]) >= (0, 4)
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
log = PipelineLogger(__name__)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="hidden states for EAGLE-3 training, offline")
    parser.add_argument("--target-model-path", required=True)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.8)
    parser.add_argument("--train-data-path", required=True)
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--layer-ids", type=int, nargs="+", default=None)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--start-idx", type=int, default=0)
    return parser.parse_args()


def find_last_checkpoint(output_dir: str) -> int:
    highest = -1
    for path in Path(output_dir).iterdir():
        if path.name.startswith("data_") and path.name.endswith(".pt"):
            try:
                highest = max(highest, int(path.stem[5:]))
            except ValueError:
                continue
    return highest + 1


def save(sample: dict, path: Path) -> Path:
    torch.save(sample, path)
    return path


def main() -> None:
    args = parse_args()
    with open(args.train_data_path) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    samples = samples[: args.max_samples] if args.max_samples is not None else samples
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    start_file = find_last_checkpoint(args.output_dir)
    if start_file > 0:
        log.subsection(f"Resuming: {start_file} files already exist")
    start = start_file - args.start_idx
    if start >= len(samples):
        log.info("All samples already processed!")
        return
    generator = VllmHiddenStatesGenerator(
        model_path=args.target_model_path,
        layer_ids=args.layer_ids,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
    )
    file_index, lengths = start_file, {}
    with ThreadPoolExecutor(max_workers=MAX_IO_WORKERS) as writers:
        futures = []
        for i in range(start, len(samples), args.batch_size):
            batch = samples[i : i + args.batch_size]
            results = generator.generate([s["input_ids"] for s in batch])
            for sample, result in zip(batch, results, strict=True):
                kept = len(result["input_ids"])  # the generator may cut a long prompt
                lengths[file_index] = kept
                record = {
                    "input_ids": torch.as_tensor(result["input_ids"], dtype=torch.long),
                    "hidden_states": [h.contiguous() for h in result["hidden_states"]],
                    "loss_mask": torch.tensor(sample["loss_mask"][:kept], dtype=torch.long),
                }
                futures.append(writers.submit(save, record, out / f"data_{file_index}.pt"))
                file_index += 1
        for future in as_completed(futures):
            future.result()
    if WRITES_LENGTHS:
        with open(out / "sample_lengths.json", "w") as f:
            json.dump(lengths, f, indent=2)
    config = DataGenerationConfig.from_generator(
        generator=generator,
        train_data_path=args.train_data_path,
        seq_length=args.max_model_len,
        cache_dir=str(out),
        num_samples=len(samples),
        max_samples=args.max_samples,
    )
    (out / "data_config.json").write_text(json.dumps(config.to_dict(), indent=2))
    log.info(f"saved {file_index - start_file} samples to {out}")


if __name__ == "__main__":
    main()
