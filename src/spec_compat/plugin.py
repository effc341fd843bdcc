"""The `vllm.general_plugins` entry point: worker-side patches in every vLLM process.

vLLM calls every general plugin in each worker process (forked or spawned) before it imports
`worker_extension_cls`, i.e. before speculators' worker mixin exists there.  The plugin does
nothing unless `spec_compat.apply()` ran in the parent and named its patch set in
`SPEC_COMPAT_PATCHES`, which worker processes inherit.
"""

from __future__ import annotations

import os
import sys

from .registry import ENV_PATCHES


def load() -> None:
    names = [n for n in os.environ.get(ENV_PATCHES, "").split(",") if n]
    if not names:
        return
    from . import REGISTRY, apply

    apply(only=[n for n in names if n in REGISTRY.patches], side="worker")


def worker_report(worker: object = None) -> dict[str, object]:
    """What a worker process sees (pass to `executor.collective_rpc`): its pid, start method
    and the state of each worker-side patch there."""
    import multiprocessing

    from . import status

    return {
        "pid": os.getpid(),
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "spawned": multiprocessing.parent_process() is not None and "__mp_main__" in sys.modules,
        "patches": {r.name: r.state.value for r in status() if r.side != "driver"},
        # the shared-memory transport's layout ("per request", "per layer"), once used
        "transport": getattr(worker, "_spec_compat_layout", None),
        "segments_reused": getattr(getattr(worker, "_spec_compat_pool", None), "reused", 0),
        "torch_threads": _torch_threads(),
        "reserved_cpus": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU"),
    }


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")  # a worker has it; never import it just to ask
    return None if torch is None else torch.get_num_threads()
