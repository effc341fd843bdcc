"""Step "hybrid" of run_release.py: every class of the installed vLLM that is both
`IsHybrid` and `SupportsEagle3`, rehearsed on the GPU with `python -m spec_compat rehearse`
for each speculators line (`pythonpath(line)`: run_release.py).

The list comes from the installed vLLM's registry, not from a table.  Each class's config is
its configuration class's defaults (transformers', else the one vLLM ships), written as a
`config.json` with the class named: rehearse shrinks it as it shrinks a user's, runs the
unchanged stock extractor under `spec_compat.apply()` on prompts that cross the stock
8,192-token step (a state layer's chunked prefill), each prompt a call, and compares with
vLLM's own EAGLE-3 aux hidden states from an engine of its own (float32 on the GPU; on the
CPU, bf16).  Here vLLM's Triton kernels run the state layers the CPU platform cannot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def candidates() -> list[tuple[str, str]]:
    """(architecture, vLLM module) of every importable IsHybrid + SupportsEagle3 class, and
    the classes that do not import, named with their reason."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import is_hybrid, supports_eagle3

    found = []
    for arch in sorted(ModelRegistry.get_supported_archs()):
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception as exc:  # recorded
            found.append((arch, f"does not import: {exc}"[:200]))
            continue
        if cls is not None and supports_eagle3(cls) and is_hybrid(cls):
            found.append((arch, cls.__module__.rsplit(".", 1)[-1]))
    return found


def default_config(arch: str) -> dict[str, Any] | None:
    """The class's configuration defaults, transformers' first, then vLLM's own classes."""
    import transformers

    cls = getattr(transformers, arch, None)
    if cls is not None and getattr(cls, "config_class", None) is not None:
        config = cls.config_class()
    else:
        from vllm.model_executor.models import ModelRegistry
        from vllm.transformers_utils.config import _CONFIG_REGISTRY

        module = ModelRegistry._try_load_model_cls(arch).__module__
        source = list(sys.modules[module].__dict__.values())
        shipped = [c for c in _CONFIG_REGISTRY.values() if any(c is v for v in source)]
        if len(shipped) != 1:
            return None
        config = shipped[0]()
    return config.to_dict() | {"architectures": [arch]}


def rehearse(directory: Path, line: str, pythonpath: Callable[[str], str]) -> dict[str, Any]:
    env = os.environ | {"PYTHONPATH": pythonpath(line)}
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "spec_compat", "rehearse", str(directory), "--json"],
            env=env, capture_output=True, text=True,
            timeout=float(os.environ.get("REHEARSE_TIMEOUT_S", "300")),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": "timed out", "seconds": time.perf_counter() - started}
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"exit_code": proc.returncode, "error": proc.stderr[-1500:]}
    keep = ("exit_code", "reference", "max_relative_error", "error", "log_tail", "seconds", "copy")
    return {k: report.get(k) for k in keep}


def run(summary: dict, pythonpath: Callable[[str], str], save) -> None:
    import tempfile

    work = Path(tempfile.mkdtemp(prefix="hybrid-"))
    lines = os.environ.get("LINES", "0.3.0,0.4.0.1").split(",")
    only = [a for a in os.environ.get("HYBRID_ONLY", "").split(",") if a]
    # classes rehearsed beside the hybrids (Gemma 4: per-layer KV-cache specs)
    also = [(a, "named in HYBRID_ALSO") for a in os.environ.get("HYBRID_ALSO", "").split(",") if a]
    rows: dict[str, Any] = {}
    summary["hybrid"] = rows
    for arch, module in candidates() + also:
        if only and arch not in only:
            continue
        if module.startswith("does not import"):
            rows[arch] = {"not run": module}
            continue
        config = default_config(arch)
        if config is None:
            rows[arch] = {"module": module, "not run": "no configuration class found"}
            continue
        directory = work / arch
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config, default=str))
        rows[arch] = {"module": module}
        for line in lines:
            rows[arch][line] = rehearse(directory, line, pythonpath)
            print(f"hybrid {arch} {line}: {rows[arch][line]}", flush=True)
            save(summary)
