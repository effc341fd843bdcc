"""Find the decoder inside multimodal wrappers for speculators 0.3.0.

Target: ``custom_worker.HiddenStatesWorkerExtension._setup_hidden_states_capture``
    (speculators 0.3.0), in every vLLM worker process.
Why: 0.3.0 requires ``supports_eagle3(model)`` and patches ``model.model``.  Wrappers keep
    the decoder at ``model.get_language_model().model`` (Llava, Qwen3-VL, Kimi-K2.5); they
    have no ``.model`` or fail the check, so set-up raises although the decoder is there.
How: the method first resolves the decoder the way speculators 0.4.x does (and handles the
    vLLM 0.15 Kimi-K2.5 shape where ``get_language_model()`` is the decoder itself); a plain
    text model still goes through the stock method untouched.  A model with no reachable
    decoder layers raises a clear ``ValueError``.
Upstream change: vLLM wrappers moved to ``get_language_model()`` (0.15 made it generic).
Remove when: speculators 0.3.0 is no longer used.
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


def probe(module: ModuleType) -> Verdict:
    if stock_mentions(module, "supports_eagle3"):
        return Verdict(
            Need.NEEDED,
            "HiddenStatesWorkerExtension requires supports_eagle3(model) and model.model",
            "wrappers keep the decoder at get_language_model().model",
        )
    return Verdict(Need.NOT_NEEDED, "the stock set-up resolves get_language_model()")


def wrap(original: Any) -> Any:
    @functools.wraps(original)
    def _setup_hidden_states_capture(self: Any, layer_ids: list[int]) -> Any:
        model = self.model_runner.model
        decoder = find_decoder(model)
        stock = sys.modules[WORKER]
        if decoder is getattr(model, "model", None) and stock.supports_eagle3(model):
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
    summary="speculators 0.3.0 worker: capture from get_language_model().model in wrappers",
    probe=probe,
    wrap=wrap,
    speculators="<0.4",
)
