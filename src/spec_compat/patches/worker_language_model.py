"""Find the decoder inside multimodal wrappers, whatever shape the wrapper has.

Target: ``custom_worker.HiddenStatesWorkerExtension._setup_hidden_states_capture``
    (both speculators lines), in every vLLM worker process.
Why: 0.3.0 requires ``supports_eagle3(model)`` and patches ``model.model``.  Wrappers keep
    the decoder at ``model.get_language_model().model`` (Llava, Qwen3-VL, Kimi-K2.5); they
    have no ``.model`` or fail the check, so set-up raises although the decoder is there.
    0.4.x looks at ``get_language_model().model``, but vLLM 0.15's Kimi-K2.5 returns the
    decoder itself from ``get_language_model()``: set-up raises ``AttributeError`` after
    the whole model has loaded.
How: the method resolves the decoder (``get_language_model().model``, then
    ``get_language_model()``, ``language_model.model``, ``model``: the first holding
    ``layers`` and ``norm``).  Where the stock set-up would pick that same module, the stock
    method runs untouched; otherwise the same set-up is done on the resolved decoder.  A
    model with no reachable decoder layers raises a clear ``ValueError``.
Upstream change: vLLM wrappers moved to ``get_language_model()`` (0.15 made it generic).
Remove when: speculators 0.3.0 is no longer used and vLLM 0.15 Kimi-K2.5 is not served.
"""

from __future__ import annotations

import functools
import sys
import types
from types import ModuleType
from typing import Any

from ..gates import Need, Verdict, stock_mentions
from ..registry import Patch
from ._stock import WORKER


def find_decoder(model: Any) -> Any:
    """The module that holds the decoder layers (`.layers`, `.norm`, `.start_layer`)."""
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
    raise ValueError(
        f"{type(model).__name__} has no reachable decoder layers (looked at "
        "get_language_model().model, get_language_model(), language_model.model, model); "
        "spec_compat cannot capture hidden states for this architecture"
    )


def stock_decoder(model: Any, stock: ModuleType) -> Any | None:
    """The module the stock set-up would patch (None where it would raise)."""
    if hasattr(stock, "supports_eagle3"):  # speculators 0.3.0
        return getattr(model, "model", None) if stock.supports_eagle3(model) else None
    if hasattr(model, "get_language_model"):  # 0.4.x
        return getattr(model.get_language_model(), "model", None)
    inner = getattr(model, "model", None)
    return inner if hasattr(inner, "layers") else None


def probe(module: ModuleType) -> Verdict:
    if stock_mentions(module, "supports_eagle3"):
        return Verdict(
            Need.NEEDED,
            "HiddenStatesWorkerExtension requires supports_eagle3(model) and model.model",
            "wrappers keep the decoder at get_language_model().model",
        )
    if stock_mentions(module, "model.get_language_model"):
        return Verdict(
            Need.NEEDED,
            "HiddenStatesWorkerExtension patches get_language_model().model",
            "vLLM 0.15's Kimi-K2.5 returns the decoder itself from get_language_model()",
        )
    return Verdict(Need.UNKNOWN, "no decoder lookup found", "the stock set-up changed")


def wrap(original: Any) -> Any:
    @functools.wraps(original)
    def _setup_hidden_states_capture(self: Any, layer_ids: list[int]) -> Any:
        model = self.model_runner.model
        decoder = find_decoder(model)
        stock = sys.modules[WORKER]
        if stock_decoder(model, stock) is decoder:
            return original(self, layer_ids)
        self._layer_ids = frozenset(layer_ids)
        self._captured_states = None
        decoder._extension = self
        decoder.forward = types.MethodType(stock._patched_forward, decoder)
        return None

    return _setup_hidden_states_capture


PATCH = Patch(
    name="worker_language_model",
    side="worker",
    module=WORKER,
    target="HiddenStatesWorkerExtension._setup_hidden_states_capture",
    summary="worker: capture from the decoder inside wrappers (0.3.0; 0.15 Kimi-K2.5 shape)",
    probe=probe,
    wrap=wrap,
)
