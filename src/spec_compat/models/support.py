"""Which models the capture serves, decided from `config.json` alone (before weights load).

The capture (patch `worker_eagle3_capture`) reads hidden states through vLLM's own EAGLE-3
aux outputs, so a model is served exactly when vLLM's class for its architecture
implements `SupportsEagle3`.  The driver refuses anything else before the engine starts,
and `doctor --model PATH` says the same from the config file.
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class UnsupportedModel(ValueError):
    """The capture cannot serve this model (or these layer ids); refused before loading."""


@dataclass(frozen=True)
class Route:
    architecture: str
    vllm_class: str | None  # None: not in the installed vLLM's model registry
    served: bool
    reason: str
    hybrid: bool = False  # vLLM's `IsHybrid`: attention beside Mamba / linear-attention state


def text_layers(config: dict[str, Any]) -> int | None:
    """The decoder's layer count, as the stock extractor reads it."""
    for section in (config, config.get("text_config") or {}):
        if isinstance(section.get("num_hidden_layers"), int):
            return section["num_hidden_layers"]
    return None


def route(architectures: list[str], patched: bool = False) -> Route:
    """How vLLM's class for the first known architecture serves the capture, in this
    process (`patched`: in a process with every patch applied, e.g. a child that applies
    them)."""
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import is_hybrid, supports_eagle3

    if not architectures:
        return Route("?", None, False, "config.json names no architecture")
    for arch in architectures:
        cls = ModelRegistry._try_load_model_cls(arch)
        if cls is None:
            continue
        name = f"{cls.__module__}.{cls.__qualname__}"
        if supports_eagle3(cls) and (refusal := setter_refusal(cls)):
            return Route(arch, name, False, f"vLLM refuses EAGLE-3 for it here: {refusal}")
        if supports_eagle3(cls) and is_hybrid(cls):
            planned, state = (True, "applied") if patched else hybrid_kv_planned()
            if not planned:
                return Route(
                    arch, name, False,
                    "a hybrid model (attention beside Mamba / linear-attention state) needs "
                    f"one KV-cache group per kind of layer; patch {HYBRID_PLANNER} plans them "
                    f"as vLLM's engine does, and it is {state} here",
                    hybrid=True,
                )  # fmt: skip
            return Route(
                arch, name, True,
                "vLLM's own EAGLE-3 aux hidden states; hybrid KV cache planned as vLLM's "
                "engine core plans it",
                hybrid=True,
            )  # fmt: skip
        if supports_eagle3(cls):
            return Route(arch, name, True, "vLLM's own EAGLE-3 aux hidden states")
        return Route(
            arch,
            name,
            False,
            f"{cls.__name__} does not implement vLLM's SupportsEagle3, so vLLM gives no aux "
            "hidden states for it and nothing proves the stock decoder loop equals its "
            "forward; use a vLLM release where this architecture supports EAGLE-3",
        )
    return Route(
        architectures[0],
        None,
        False,
        f"{architectures} not in this vLLM's model registry (vLLM would fall back to a "
        "generic backend whose hidden states the capture cannot vouch for)",
    )


#: the patch that plans a hybrid model's KV-cache groups (with the two it requires)
HYBRID_PLANNER = "kv_cache_hybrid_plan"


def hybrid_kv_planned() -> tuple[bool, str]:
    """Whether the stock extractor will plan hybrid KV caches here, and the planner's state
    (applied, or pending until the stock module is imported, which decides it then)."""
    from spec_compat.engine.patch import State
    from spec_compat.engine.registry import process_registry

    registry = process_registry()
    for result in registry.status() if registry is not None else ():
        if result.name == HYBRID_PLANNER:
            return result.state in (State.APPLIED, State.PENDING), result.state.value
    return False, "not selected"


def setter_refusal(cls: type) -> str | None:
    """vLLM's own preconditions for EAGLE-3 on `cls`, checked without building a model.

    `set_aux_hidden_state_layers` is called with no layers on an unbuilt instance: a
    precondition it checks first (vLLM 0.16's transformers backend needs transformers 5)
    raises ImportError or NotImplementedError; reaching the model's state raises anything
    else, which means no precondition failed."""
    shell = object.__new__(cls)
    try:
        cls.set_aux_hidden_state_layers(shell, ())
    except (ImportError, NotImplementedError) as exc:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return None
    return None


def model_route(path: str) -> dict[str, Any]:
    """What the capture does for the model at `path`, from its config.json alone, and what
    the architecture sweep measured for its class here (doctor --model): a measured failure
    refuses it."""
    from spec_compat.engine.versions import speculators_version, vllm_version
    from spec_compat.models.proofs import proof

    config = read_config(path)
    found = route(config.get("architectures") or [])
    report = {"path": path, "layers": text_layers(config)} | {
        key: getattr(found, key)
        for key in ("architecture", "vllm_class", "served", "reason", "hybrid")
    }
    measured = proof(found.architecture, str(vllm_version()), str(speculators_version()))
    report["proof"] = measured.state
    report["proof_detail"] = measured.detail
    if found.served and measured.state == "failed":
        report["served"], report["reason"] = False, measured.detail
    return report


def read_config(path: str | Path) -> dict[str, Any]:
    """`config.json` of a local model directory (nothing else is read)."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"{path}: no config.json (a local model directory is needed)")
    return json.loads(file.read_text())


def check_layer_ids(layer_ids: Any, num_layers: int | None) -> None:
    """Refuse layer ids the capture cannot honour, saying what to pass instead.

    Order and repeats are kept: the states come back in the order given, a repeated id
    giving the same state twice (as the stock auto-selection does on small models)."""
    if layer_ids is None:
        return
    if isinstance(layer_ids, (str, bytes)) or not hasattr(layer_ids, "__iter__"):
        raise UnsupportedModel(
            f"layer_ids={layer_ids!r}: pass a list of layer indices (e.g. [2, 16, 29]) or None "
            "for the stock selection"
        )
    ids = list(layer_ids)
    upper = f"0..{num_layers - 1}" if num_layers else "the model's layers"
    if not ids:
        raise UnsupportedModel(
            f"layer_ids=[] asks for no hidden states: pass indices in {upper}, or None for "
            "the stock selection"
        )
    bad = [k for k in ids if isinstance(k, bool) or not isinstance(k, numbers.Integral)]
    if bad:
        raise UnsupportedModel(f"layer_ids {ids}: {bad} not integers; pass indices in {upper}")
