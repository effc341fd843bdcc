"""Which model runner vLLM's workers use, and the V2 names the row attribution reads.

Model Runner V1 (`v1/worker/gpu_model_runner.py`, `input_batch`) is what both stock lines
were written against; V2 (`v1/worker/gpu/model_runner.py`) became vLLM's default for every
model from 0.29 where Triton is available, and the only runner from 0.34.  `model_runner_v1`,
`model_runner_v2_rows`, the capture and doctor share these facts.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

V1_RUNNER = "vllm.v1.worker.gpu_model_runner"
V2_RUNNER = "vllm.v1.worker.gpu.model_runner"
V2_BATCH = "vllm.v1.worker.gpu.input_batch"
KNOB = "VLLM_USE_V2_MODEL_RUNNER"
#: what the row attribution reads of the batch a V2 step runs (`InputBatch`): the request
#: of each row block, the blocks' bounds, and what makes rows the rule cannot describe
BATCH_FIELDS = (
    "req_ids",
    "query_start_loc_np",
    "num_tokens",
    "num_tokens_after_padding",
    "num_draft_tokens",
)
#: `GPUModelRunner.prepare_inputs(scheduler_output, ...) -> InputBatch`: the step's own map
PREPARE = "prepare_inputs"


def _present(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def has_v1() -> bool:
    return _present(V1_RUNNER)


def has_v2() -> bool:
    return _present(V2_RUNNER)


def v2_names() -> list[tuple[str, bool, str]]:
    """The V2 names the row attribution relies on: (name, present, what was found)."""
    import dataclasses
    import importlib
    import inspect

    found: list[tuple[str, bool, str]] = []
    runner = getattr(importlib.import_module(V2_RUNNER), "GPUModelRunner", None)
    prepare = getattr(runner, PREPARE, None)
    params = list(inspect.signature(prepare).parameters)[1:] if prepare else []
    found.append(
        (
            f"GPUModelRunner.{PREPARE}",
            bool(params) and params[0] == "scheduler_output",
            f"{PREPARE}({', '.join(params)})" if prepare else "absent",
        )
    )
    batch = getattr(importlib.import_module(V2_BATCH), "InputBatch", None)
    fields = set()
    if dataclasses.is_dataclass(batch):
        fields = {f.name for f in dataclasses.fields(batch)}
    for name in BATCH_FIELDS:
        present = name in fields
        found.append((f"InputBatch.{name}", present, "field" if present else "absent"))
    return found


def v2_rows_served() -> tuple[bool, str]:
    """Whether `model_runner_v2_rows` can attribute this vLLM's V2 rows, and what was seen."""
    if not has_v2():
        return False, f"no {V2_RUNNER}"
    try:
        names = v2_names()
    except Exception as exc:
        return False, f"{V2_RUNNER} does not import: {type(exc).__name__}: {exc}"
    missing = [name for name, present, _ in names if not present]
    seen = "; ".join(f"{name}: {what}" for name, _, what in names)
    return not missing, (f"lacks {', '.join(missing)} ({seen})" if missing else seen)


def is_v2(runner: Any) -> bool:
    """A V2 runner instance: V2's `GPUModelRunner` or a platform's subclass of it (read
    from the class's MRO: a V1 worker never imports V2's module for this)."""
    return any(
        (cls.__module__, cls.__name__) == (V2_RUNNER, "GPUModelRunner")
        for cls in type(runner).__mro__
    )


def workers_runner() -> tuple[str, str]:
    """The runner a stock engine's workers will use here, as vLLM decides it: ("V1" | "V2" |
    "V1 or V2", why).  Without a model: V2's unsupported features depend on the model."""
    import os

    if not has_v2():
        return "V1", "this vLLM has no Model Runner V2"
    if not has_v1():
        return "V2", "this vLLM has no Model Runner V1"
    value = os.environ.get(KNOB)
    if value is not None:
        chosen = "V2" if value.strip().lower() in ("1", "true") else "V1"
        return chosen, f"{KNOB}={value}"
    from vllm.config import VllmConfig

    if not isinstance(getattr(VllmConfig, "use_v2_model_runner", None), property):
        return "V1", f"vLLM's default ({KNOB} unset)"
    try:
        from vllm.triton_utils import HAS_TRITON
    except Exception:
        HAS_TRITON = False
    if not HAS_TRITON:
        return "V1", "vLLM's default without Triton"
    return "V2", "vLLM's default (V1 for a model using a feature V2 lacks)"


def runner_report(forced_v1: bool) -> dict[str, Any]:
    """doctor's record: the runner the workers will use, and the V2 names read."""
    workers, why = workers_runner()
    if forced_v1:
        workers, why = "V1", "model_runner_v1 starts the workers on V1"
    names: list[dict[str, Any]] = []
    if has_v2():
        try:
            names = [{"name": n, "present": p, "found": f} for n, p, f in v2_names()]
        except Exception as exc:
            names = [{"name": V2_RUNNER, "present": False, "found": f"{type(exc).__name__}: {exc}"}]
    return {"workers": workers, "why": why, "v2_names": names}
