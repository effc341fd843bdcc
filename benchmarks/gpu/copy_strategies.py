"""How fast can captured rows leave the GPU while the next step computes?  Torch only.

Simulates the extractor's pass on the H200 workload (41 steps of 8,192 rows, 4 captured
layers of width 2,048, bf16, 32 requests per step) with synthetic GPU work per step, and
times, side by side, compute alone and spec_compat's per-request transport (`CallStore` +
`Copier`, 1/2/4/8 host threads) including the driver's take-over of the results; and the
earlier layout (a reused pinned arena, then the stock driver's clone on 8 threads).
Worker processes run torch with one thread (vLLM sets OMP_NUM_THREADS=1), as here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from spec_compat.transport import Attachments, CallStore, Copier

LAYERS, WIDTH, ROWS, STEPS, REQUESTS = 4, 2048, 8192, 41, 32
torch.set_num_threads(1)
weights = [torch.randn(WIDTH, WIDTH, device="cuda", dtype=torch.bfloat16) for _ in range(2)]


def step_states(depth: int) -> list[torch.Tensor]:
    x = torch.randn(ROWS, WIDTH, device="cuda", dtype=torch.bfloat16)
    captured = []
    for i in range(depth):
        x = torch.tanh(x @ weights[i % 2])
        if i % (depth // LAYERS) == 0 and len(captured) < LAYERS:
            captured.append(x.clone())
    return captured


def run(strategy: str, depth: int) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    per = ROWS // REQUESTS
    if strategy.startswith("threads"):
        store = CallStore(LAYERS, WIDTH, torch.bfloat16, 2048, 32)
        copier = Copier(threads=int(strategy.split("=")[1]))
        for step in range(STEPS):
            states = step_states(depth)
            pieces = [(store.rows_for(f"r{step}_{r}", per), r * per, per) for r in range(REQUESTS)]
            copier.submit(store, states, pieces)
        copier.drain()
        taken = Attachments().from_descriptors(store.describe())
        results = [[t.clone() for t in layers] for layers in taken.values()]
        store.close()
    elif strategy == "pinned-arena+clone8":
        arena = torch.empty((LAYERS, STEPS * ROWS, WIDTH), dtype=torch.bfloat16, pin_memory=True)
        for step in range(STEPS):
            for i, state in enumerate(step_states(depth)):
                arena[i, step * ROWS : (step + 1) * ROWS].copy_(state, non_blocking=True)
        torch.cuda.synchronize()
        torch.set_num_threads(8)
        results = [
            [arena[i, r * per : (r + 1) * per].clone() for i in range(LAYERS)]
            for r in range(STEPS * REQUESTS)
        ]
        torch.set_num_threads(1)
    else:
        for _ in range(STEPS):
            step_states(depth)
        results = []
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    del results
    return seconds


def main() -> None:
    depth = 192  # ~20 ms of GPU work per step: ~0.9 s per pass, as the real forward
    run("compute", depth)
    strategies = ["compute", "threads=1", "threads=2", "threads=4", "threads=8"]
    strategies.append("pinned-arena+clone8")
    times: dict[str, list[float]] = {s: [] for s in strategies}
    for _ in range(3):
        for strategy in strategies:
            times[strategy].append(run(strategy, depth))
    base = min(times["compute"])
    summary = {s: {"best_s": min(t), "vs_compute": base / min(t)} for s, t in times.items()}
    print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
