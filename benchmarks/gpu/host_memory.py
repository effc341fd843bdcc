"""Where can a pass's captured states (5.4 GB) land in host memory fastest?  Torch only.

Times, side by side in one process, writing the same bytes from a pinned staging buffer
into host memory of each kind the transport could use, with 1 and 8 threads, twice each
(the second round reuses nothing but the machine, whose memory has grown by then):

- fresh shared memory (a new /dev/shm file, written through its mapping: 4 KiB faults);
- the same, populated first in one call (`MADV_POPULATE_WRITE`);
- shared memory already written once (a reused segment);
- fresh anonymous memory (`torch.empty`), with and without transparent huge pages;
- GPU -> registered (page-locked) shared memory by DMA alone, and what registering costs.

Prints one JSON object: GB/s per destination, plus the host's THP settings.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

GB = 1 << 30
TOTAL = int(os.environ.get("HOST_MEMORY_GB", "4")) * GB
CHUNK = 5 << 20  # one request's rows of one layer, roughly (1,280 rows x 2,048 x bf16)
MADV_POPULATE_WRITE = 23
MADV_HUGEPAGE = 14
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def thp() -> dict:
    base = Path("/sys/kernel/mm/transparent_hugepage")
    out = {}
    for name in ("enabled", "shmem_enabled", "defrag"):
        try:
            out[name] = (base / name).read_text().strip()
        except OSError as exc:
            out[name] = str(exc)
    return out


def shm_flat(name: str, populate: bool) -> tuple[torch.Tensor, mmap.mmap]:
    path = f"/dev/shm/{name}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, TOTAL)
    mapping = mmap.mmap(fd, TOTAL)
    os.close(fd)
    flat = torch.frombuffer(mapping, dtype=torch.uint8)
    if populate:
        rc = libc.madvise(ctypes.c_void_p(flat.data_ptr()), TOTAL, MADV_POPULATE_WRITE)
        if rc != 0:
            raise OSError(ctypes.get_errno(), "madvise(MADV_POPULATE_WRITE)")
    return flat, mapping


def anon_flat(huge: bool) -> torch.Tensor:
    # 2 MiB-aligned anonymous mapping, optionally advised huge (what THP_MEM_ALLOC_ENABLE
    # makes torch do for large tensors)
    mapping = mmap.mmap(-1, TOTAL + (2 << 20))
    flat = torch.frombuffer(mapping, dtype=torch.uint8)
    skip = (-flat.data_ptr()) % (2 << 20)
    flat = flat[skip : skip + TOTAL]
    if huge:
        libc.madvise(ctypes.c_void_p(flat.data_ptr()), TOTAL, MADV_HUGEPAGE)
    flat._keep = mapping  # type: ignore[attr-defined]
    return flat


def fill(dst: torch.Tensor, src: torch.Tensor, threads: int) -> float:
    chunks = TOTAL // CHUNK
    started = time.perf_counter()

    def work(first: int) -> None:
        for c in range(first, chunks, threads):
            dst[c * CHUNK : (c + 1) * CHUNK].copy_(src[(c % 16) * CHUNK : (c % 16 + 1) * CHUNK])

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))
    return time.perf_counter() - started


def main() -> None:
    torch.set_num_threads(1)
    src = torch.randint(0, 255, (16 * CHUNK,), dtype=torch.uint8)
    if torch.cuda.is_available():
        src = src.pin_memory()
    results: dict[str, list[float]] = {}

    def record(key: str, seconds: float) -> None:
        results.setdefault(key, []).append(round(TOTAL / GB / seconds, 2))

    for round_ in range(2):
        for threads in (1, 8):
            for kind in ("shm-fresh", "shm-populated", "anon-4k", "anon-thp"):
                started = time.perf_counter()
                if kind.startswith("shm"):
                    name = f"hm_{round_}_{threads}_{kind}"
                    dst, mapping = shm_flat(name, kind == "shm-populated")
                else:
                    dst, mapping = anon_flat(kind == "anon-thp"), None
                setup = time.perf_counter() - started
                seconds = fill(dst, src, threads)
                record(f"{kind} x{threads}", seconds + setup)
                if kind == "shm-fresh":  # written once: now time the reuse
                    record(f"shm-reused x{threads}", fill(dst, src, threads))
                del dst
                if mapping is not None:
                    mapping.close()
                    os.unlink(f"/dev/shm/hm_{round_}_{threads}_{kind}")
    if torch.cuda.is_available():
        gpu = torch.randn(TOTAL // 2 // 8, dtype=torch.bfloat16, device="cuda")
        dst, mapping = shm_flat("hm_dma", populate=False)
        started = time.perf_counter()
        rc = torch.cuda.cudart().cudaHostRegister(dst.data_ptr(), TOTAL, 0)
        register = time.perf_counter() - started
        results["register GB/s"] = [round(TOTAL / GB / register, 2), int(rc)]
        view = dst.view(torch.bfloat16)
        for _ in range(2):
            torch.cuda.synchronize()
            started = time.perf_counter()
            for i in range(8):
                part = view[i * gpu.numel() : (i + 1) * gpu.numel()]
                part.copy_(gpu, non_blocking=True)
            torch.cuda.synchronize()
            record("dma->registered shm", time.perf_counter() - started)
        torch.cuda.cudart().cudaHostUnregister(dst.data_ptr())
        del view, dst
        mapping.close()
        os.unlink("/dev/shm/hm_dma")
    print(json.dumps({"GB_per_s": results, "thp": thp(), "cpus": os.cpu_count()}), flush=True)


if __name__ == "__main__":
    main()
