#!/usr/bin/env python3
"""speculators' `scripts/data_generation_offline.py` as the 0.3.0 and 0.4.0.1 tags ship it,
in its shape (written here, not copied: its arguments, numbering, resume and output files),
for `spec-compat run --replicas`, which needs what the other stand-ins leave out:
the data comes from speculators' own `load_and_preprocess_dataset` (a chat dataset, the
tokenizer's chat template, seeded shuffle, token frequencies at `--token-freq-path`).

After loading it is `datagen_resume_script.py`'s output side, imported: `find_last_checkpoint`
resume, batches of `--batch-size`, 4 writer threads, 0.4.x's `sample_lengths.json`, then
`data_config.json`.  Arguments as after speculators PR #198: no `--max-model-len`, the model
is sized by `--seq-length`.

Test hooks (driver process only): the engine in float32 and SPEC_COMPAT_TEST_KILL /
SPEC_COMPAT_TEST_KILL_ONCE (`kill_launcher.py`), imported in `main()` because the replicas
driver starts this script under plain `spec-compat run`, with no launcher of ours.

    spec-compat run tests/e2e/datagen_upstream_script.py --target-model-path MODEL \\
        --train-data-path chat.jsonl --output-dir out --tensor-parallel-size 1
"""

import argparse

import torch
from datagen_resume_script import generate_and_save
from datagen_script import argument_parser, log
from datasets import config as datasets_config
from speculators.data_generation.preprocessing import load_and_preprocess_dataset


def parse_args() -> argparse.Namespace:
    parser = argument_parser(torch.accelerator.device_count(), max_model_len=False)
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--token-freq-path", default="./token_freq.pt")
    parser.add_argument("--hf-cache-dir", default=None)
    parser.add_argument("--assistant-pattern", default=None)
    parser.add_argument("--turn-dropout", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start-idx", type=int, default=0)
    parser.add_argument("--num-preprocessing-workers", type=int, default=8)
    return parser.parse_args()


class Rows:
    """The preprocessed dataset as the upstream loop reads it, `dataset[i:j]` (a batch of
    columns, sliced past the end as Python slices), handed on as that batch's rows."""

    def __init__(self, dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, span: slice) -> list[dict]:
        batch = self.dataset[span]
        columns = zip(batch["input_ids"], batch["loss_mask"], strict=True)
        return [{"input_ids": ids, "loss_mask": mask} for ids, mask in columns]


def main() -> None:
    import kill_launcher  # noqa: F401  (test hooks: float32 engine, kill moments)

    args = parse_args()
    log.section("EAGLE Offline Data Generation")
    dataset, _ = load_and_preprocess_dataset(
        target_model_path=args.target_model_path,
        train_data_path=args.train_data_path,
        seq_length=args.seq_length,
        build_dataset_num_proc=args.num_preprocessing_workers,
        seed=args.seed,
        max_samples=args.max_samples,
        token_freq_path=args.token_freq_path,
        cache_dir=args.hf_cache_dir,
        assistant_pattern=args.assistant_pattern,
        turn_dropout=args.turn_dropout,
    )
    cache_dir = args.hf_cache_dir or datasets_config.HF_DATASETS_CACHE
    generate_and_save(
        args, Rows(dataset), seq_length=args.seq_length, cache_dir=str(cache_dir), seed=args.seed
    )


if __name__ == "__main__":
    main()
