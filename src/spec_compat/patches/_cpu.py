"""vLLM CPU-platform facts the stock code gets wrong: free memory and KV block sizes."""

from __future__ import annotations

import os
from typing import Any

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


def cpu_attention_backend() -> Any:
    """vLLM's CPU attention backend class (CPUAttentionBackend; TorchSDPABackend up to 0.11)."""
    from vllm.v1.attention.backends import cpu_attn

    for name in ("CPUAttentionBackend", "TorchSDPABackend"):
        if hasattr(cpu_attn, name):
            return getattr(cpu_attn, name)
    raise ImportError(f"no CPU attention backend class in {cpu_attn.__name__}")


def kernel_block_sizes(backend: Any) -> list[Any]:
    """What the backend declares; backends that declare nothing take any block size."""
    declared = getattr(backend, "get_supported_kernel_block_sizes", None)
    return list(declared()) if declared is not None else []


def supported_block_size(requested: int, supported: list[Any]) -> int:
    """The smallest block size the backend supports that is at least `requested`.

    `supported` holds ints and `MultipleOf(base)` entries, as attention backends declare
    them in `get_supported_kernel_block_sizes()`.
    """
    candidates = []
    for entry in supported:
        base = getattr(entry, "base", None)
        if base is not None:
            candidates.append(-(-requested // base) * base)
        elif isinstance(entry, int) and entry >= requested:
            candidates.append(entry)
    if not candidates:
        raise ValueError(f"no supported block size >= {requested} in {supported}")
    return min(candidates)


def cpu_block_size(requested: int) -> int:
    """The KV block size the stock extractor's cache really gets on the CPU platform."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return requested
    sizes = kernel_block_sizes(cpu_attention_backend())
    return supported_block_size(requested, sizes) if sizes else requested
