"""The process start-up hook: a patched parent's selection, active from a child's first line.

The wheel ships `spec_compat_startup.pth` into site-packages.  Python's `site` module runs
its one line in every interpreter start-up; the line does nothing unless the environment
holds `SPEC_COMPAT_PATCHES`, which `apply()` sets and every child process inherits.  Then it
calls `run()` here, before `__main__` or anything else the child imports: a spawned vLLM
worker re-imports the user's script (`multiprocessing.spawn`), and that script may import
speculators at module level, long before any vLLM plugin would load.  coverage.py starts
in subprocesses the same way.

`SPEC_COMPAT_STARTUP=0` switches the hook off (children then run unpatched).
"""

from __future__ import annotations

import os
import site
import sys
from typing import TYPE_CHECKING

from spec_compat.engine.names import ENV_STARTUP
from spec_compat.engine.selection import requested

if TYPE_CHECKING:
    from pathlib import Path

PTH_NAME = "spec_compat_startup.pth"
#: set by run(): True once the hook applied the parent's selection in this process
ACTIVE = False
#: the exception apply() raised at start-up, if any (re-raised when speculators is imported)
FAILED: BaseException | None = None


def run() -> None:
    """Apply the selection named in the environment (called by the `.pth` line)."""
    global ACTIVE, FAILED
    names, strict = requested()
    if not names or os.environ.get(ENV_STARTUP) == "0":
        return
    try:
        from spec_compat.api import REGISTRY, apply
        from spec_compat.rehearse import seeded_weights

        if os.environ.get(seeded_weights.ENV) == "1":  # a rehearsal with no checkpoint
            seeded_weights.register_when_imported()
        known = set(REGISTRY.patches)
        apply(only=[n for n in names if n in known], strict=strict)
        ACTIVE = True
    except Exception as exc:  # `site` would print and swallow it: fail where it matters
        FAILED = exc
        _refuse_stock_imports(exc)


def _refuse_stock_imports(exc: Exception) -> None:
    """An unpatched stock extractor must not run silently: importing it raises instead."""
    import wrapt

    from spec_compat.engine.names import GENERATOR, WORKER

    def refuse(module: object) -> None:
        raise RuntimeError(
            f"spec_compat's start-up hook could not apply the parent's patches in pid "
            f"{os.getpid()}: {type(exc).__name__}: {exc}"
        ) from exc

    for name in (GENERATOR, WORKER):
        wrapt.register_post_import_hook(refuse, name)


def hook_file() -> Path | None:
    """The installed `.pth` file this interpreter runs at start-up, if any."""
    from pathlib import Path  # here: apply() does not need it (pathlib loads urllib)

    dirs = site.getsitepackages()
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    for folder in dict.fromkeys(dirs):
        candidate = Path(folder) / PTH_NAME
        if candidate.is_file() and "spec_compat.startup" in candidate.read_text():
            return candidate
    return None


def report() -> dict[str, object]:
    """For doctor: where the hook is installed and what it did in this process."""
    found = hook_file()
    return {
        "installed": str(found) if found else None,
        "active": ACTIVE,
        "error": None if FAILED is None else f"{type(FAILED).__name__}: {FAILED}",
        "switched_off": os.environ.get(ENV_STARTUP) == "0",
    }


def worker_report(worker: object = None) -> dict[str, object]:
    """What a worker process sees (pass to `executor.collective_rpc`): its pid, start method,
    whether the start-up hook applied the patches, and the state of each worker-side patch."""
    import multiprocessing

    from spec_compat.api import status
    from spec_compat.engine.names import WORKER_TRANSPORT

    transport = getattr(worker, WORKER_TRANSPORT, None)
    return {
        "pid": os.getpid(),
        "start_method": multiprocessing.get_start_method(allow_none=True),
        "spawned": multiprocessing.parent_process() is not None and "__mp_main__" in sys.modules,
        "startup_hook": ACTIVE,
        "patches": {r.name: r.state.value for r in status() if r.side != "driver"},
        # the shared-memory transport's layout ("per request", "per layer"), once used
        "transport": getattr(transport, "used", None),
        "segments_reused": getattr(transport, "reused", 0),
        "torch_threads": _torch_threads(),
        "reserved_cpus": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU"),
    }


def _torch_threads() -> int | None:
    torch = sys.modules.get("torch")  # a worker has it; never import it just to ask
    return None if torch is None else torch.get_num_threads()
