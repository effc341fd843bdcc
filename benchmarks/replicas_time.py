"""The data script with 1 and 2 replicas against one plain run, side by side.

    PYTHONPATH=.venvs/speculators-0.4.0.1 .venvs/vllm-0.32.0/bin/python \
        benchmarks/replicas_time.py [--samples 32] [--batch-size 4]

Builds the tests' tiny chat Llama and a chat dataset (`tests/e2e/tiny_models.py`), then runs
`tests/e2e/datagen_upstream_script.py` (speculators' own `load_and_preprocess_dataset`)
three ways, one after the other: a plain `spec-compat run`, `--replicas 1` and
`--replicas 2` (one chunk a replica, a local Ray).  Prints each wall time, the ratios to the
plain run, and whether each set's tensors equal the plain run's.  Every replica starts its
own vLLM, so on a host with fewer cores than replicas want, two replicas share the cores:
this measures the driver's overhead and what parallelism the host gives, not a GPU node.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
SCRIPT = ROOT / "tests" / "e2e" / "datagen_upstream_script.py"
LAYERS = ("0", "2", "3")


def inputs(work: Path, samples: int) -> tuple[Path, Path]:
    from e2e import tiny_models

    model = tiny_models.add_chat_template(tiny_models.build_llama(work / "model"))
    data = work / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in tiny_models.chat_samples(samples)))
    return model, data


def run(work: Path, name: str, model: Path, data: Path, batch: int, driver: list[str]) -> float:
    root = work / name
    root.mkdir()
    args = [
        "--target-model-path", str(model), "--train-data-path", str(data),
        "--hf-cache-dir", str(work / "hf-cache"), "--output-dir", str(root / "out"),
        "--token-freq-path", str(root / "token_freq.pt"), "--seq-length", "128",
        "--batch-size", str(batch), "--tensor-parallel-size", "1",
        "--num-preprocessing-workers", "1", "--layer-ids", *LAYERS,
    ]  # fmt: skip
    env = os.environ | {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "RAY_USAGE_STATS_ENABLED": "0"}
    command = [sys.executable, "-m", "spec_compat", "run", *driver, str(SCRIPT), *args]
    started = time.perf_counter()
    with open(root / "run.log", "w") as log:
        code = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{name} failed ({code}): see {root / 'run.log'}")
    return seconds


def same_set(one: Path, other: Path, samples: int) -> bool:
    import torch

    for i in range(samples):
        a, b = (torch.load(d / "out" / f"data_{i}.pt", weights_only=True) for d in (one, other))
        if a.keys() != b.keys():
            return False
        for key in a:
            x, y = a[key], b[key]
            pairs = zip(x, y, strict=True) if isinstance(x, list) else [(x, y)]
            if not all(torch.equal(p, q) for p, q in pairs):
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replicas-time-") as tmp:
        work = Path(tmp)
        model, data = inputs(work, args.samples)
        plans = {
            "plain": [],
            "replicas-1": ["--replicas", "1", "--chunks-per-replica", "1"],
            "replicas-2": ["--replicas", "2", "--chunks-per-replica", "1"],
        }
        times = {}
        for name, driver in plans.items():
            times[name] = run(work, name, model, data, args.batch_size, driver)
            print(f"{name}: {times[name]:.1f} s", flush=True)
        print(f"{args.samples} samples, batch {args.batch_size}, {os.cpu_count()} CPUs")
        for name in ("replicas-1", "replicas-2"):
            equal = same_set(work / "plain", work / name, args.samples)
            print(
                f"{name} / plain = {times[name] / times['plain']:.2f}; "
                f"set {'equal to' if equal else 'DIFFERENT from'} the plain run's"
            )


if __name__ == "__main__":
    main()
