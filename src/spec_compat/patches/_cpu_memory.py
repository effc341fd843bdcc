"""Free-memory figures for vLLM's CPU platform, where the stock code asks CUDA."""

from __future__ import annotations

import os

GIB = 1 << 30


def cpu_mem_get_info(cache_fraction: float) -> tuple[int, int]:
    """`(free, total)` bytes as `torch.cuda.mem_get_info` would report them on a GPU.

    The stock extractors size the KV cache as `free * gpu_memory_utilization *
    cache_fraction`.  `free` is the memory available now, capped so that the KV cache stays
    within `VLLM_CPU_KVCACHE_SPACE` GiB when that is set (vLLM's own CPU knob, which the stock
    code would otherwise ignore).
    """
    import psutil

    memory = psutil.virtual_memory()
    free = memory.available
    space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
    if space:
        free = min(free, int(float(space) * GIB / cache_fraction))
    return free, memory.total
