"""Where a vLLM model instance keeps its decoder layers: text models, multimodal wrappers
and models that nest their language model one level deeper."""

from __future__ import annotations

from typing import Any


def find_decoder(model: Any) -> Any | None:
    """The module that holds the decoder layers (`.layers`, `.norm`), where there is one:
    only a model that does not emit the last layer's aux state needs it."""
    language_model = model.get_language_model() if hasattr(model, "get_language_model") else None
    candidates = [
        getattr(language_model, "model", None),
        language_model,
        getattr(getattr(model, "language_model", None), "model", None),
        getattr(model, "model", None),
    ]
    for candidate in candidates:
        if candidate is not None and hasattr(candidate, "layers") and hasattr(candidate, "norm"):
            return candidate
    return None
