"""Give the stock driver's result copies more than one CPU thread (GPU platforms).

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (speculators
    0.3.0 and 0.4.x), on GPU platforms only.
Why: ``MultiprocExecutor`` drops the driver process to one torch thread ("to avoid CPU
    contention" with CPU workers).  The stock driver then clones every captured tensor on
    that one thread: on an H200 with the shared-memory transport, copying 5.4 GB of states
    out was the largest remaining cost (B/A 0.19 with one thread, 0.24 with eight).
How: while ``generate`` runs, torch in the driver may use up to half the host's cores (at
    most 8); the previous setting is restored afterwards.  The driver computes nothing else
    meanwhile (the GPU workers do), so there is no contention to avoid.  Not applied on
    vLLM's CPU platform, where the workers need those cores.
Upstream change: vLLM's ``MultiprocExecutor`` sets ``torch.set_num_threads(1)`` in the driver.
Remove when: the extractor stops copying states on the driver (speculators >= 0.5).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict

MAX_THREADS = 8


def probe(module: ModuleType) -> Verdict:
    return Verdict(Need.NEEDED, f"{os.cpu_count()} host cores", "stock copies run on 1 thread")


def wrap(original: Any) -> Any:
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        import torch

        previous = torch.get_num_threads()
        torch.set_num_threads(max(previous, min(MAX_THREADS, (os.cpu_count() or 2) // 2)))
        try:
            return original(self, *args, **kwargs)
        finally:
            torch.set_num_threads(previous)

    return generate


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.generate",
    summary="GPU platforms: several torch threads for the stock driver's result copies",
    platform="gpu",
)
