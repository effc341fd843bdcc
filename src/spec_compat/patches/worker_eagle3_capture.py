"""Capture through vLLM's own EAGLE-3 aux hidden states, in the order the caller gave.

Target: ``custom_worker.HiddenStatesWorkerExtension._setup_hidden_states_capture`` (both
    speculators lines), in every vLLM worker.
Why: the stock set-up binds a re-implementation of the decoder loop onto ``model.model``:
    each layer gets ``(hidden_states, positions, residual)`` and nothing else the model's
    own forward does happens (DeepSeek's ``llama_4_scaling``, Qwen3-VL's deepstack
    embeddings, a loop that lives in a parent class as in vLLM's Mistral): a different
    model is captured, silently or with a crash after the weights loaded.  0.3.0 looks only
    at ``model.model`` (wrappers fail); 0.4.x at ``get_language_model().model`` (vLLM 0.15's
    Kimi-K2.5 returns the decoder itself).  And the ids become a frozenset: states come
    back ascending and de-duplicated (``[3, 0, 2]`` gives ``[0, 2, 3]``; a 4-layer model's
    auto-selection ``[2, 2, 1, 3]`` gives 3 states).
How: the model's own forward runs, asked through ``SupportsEagle3.set_aux_hidden_state_layers``
    for vLLM ids ``k + 1`` (the state entering layer ``k + 1``); the model then returns
    ``(hidden_states, aux)``, which is what vLLM's runner reads for EAGLE-3 decoding, so
    the capture is exact by construction (native decoders and the transformers backend
    alike); only ``hidden_states`` goes on, and each step's rows go to the stock code in
    the order the driver scheduled their requests (on Model Runner V2, which sorts each
    step, through ``model_runner_v2_rows``'s map of the step; refused without it).
    Releases whose models record aux states only before each layer never emit the id past
    the last layer; that state is then taken as it enters the final norm
    (``hidden_states + residual``).  Each step's states are stored in the caller's order,
    a repeated id repeated.  A model without ``SupportsEagle3`` raises
    ``CaptureUnsupported`` (the driver refuses it earlier, from ``config.json``).
Upstream change: none in vLLM; the stock loop was always a copy of one model's forward.
Remove when: speculators captures through vLLM's aux hidden states (0.5+ uses vLLM's
    native extraction instead of this extractor).
"""

from __future__ import annotations

import functools
import types
from types import ModuleType
from typing import TYPE_CHECKING, Any

from spec_compat.engine.names import WORKER
from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature, signature_text
from spec_compat.models.decoder import find_decoder
from spec_compat.patches._handoff import StepRows
from spec_compat.patches._model_runner import is_v2

if TYPE_CHECKING:
    import inspect


class CaptureUnsupported(RuntimeError):
    """The model cannot give the requested states exactly: refused, never guessed."""


@functools.cache
def _forward_signature(module_cls: type) -> inspect.Signature:
    """The named signature of a call: vLLM's custom ops (RMSNorm) take `*args, **kwargs`
    in `forward` and dispatch to `forward_native(x, residual)`."""
    import inspect  # with the capture, not with apply()

    for name in ("forward", "forward_native"):
        found = inspect.signature(getattr(module_cls, name, None) or module_cls.forward)
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if any(p.kind not in variadic for p in list(found.parameters.values())[1:]):
            return found
    return inspect.signature(module_cls.forward)


def entering_state(module: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """`hidden_states + residual` as a call of `module` (the final norm) receives them."""
    bound = _forward_signature(type(module)).bind(module, *args, **kwargs).arguments
    hidden = bound.get("hidden_states", bound.get("x"))
    if hidden is None:
        raise CaptureUnsupported(
            f"cannot find the hidden states in a call of {type(module).__name__}"
            f"{_forward_signature(type(module))}"
        )
    residual = bound.get("residual")
    # the norm may work in place (vLLM's fused add-RMSNorm): keep a copy of a bare input
    return hidden.clone() if residual is None else hidden + residual


class Eagle3Capture:
    """One decoder's capture: the vLLM ids asked for, and the caller's order."""

    def __init__(self, model: Any, decoder: Any, layer_ids: list[int], extension: Any = None):
        from vllm.model_executor.models.interfaces import supports_eagle3

        name = type(model).__name__
        if not supports_eagle3(model):
            raise CaptureUnsupported(
                f"{name} does not implement vLLM's SupportsEagle3: vLLM gives no aux hidden "
                "states for it, and the stock loop is not proven to equal its forward"
            )
        wanted = sorted(set(layer_ids))
        self.slots = [wanted.index(k) for k in layer_ids]  # caller's order, repeats kept
        self.aux_ids = tuple(k + 1 for k in wanted)
        model.set_aux_hidden_state_layers(self.aux_ids)
        self.model_name = name
        self.extension = extension
        self.on_v2 = is_v2(getattr(extension, "model_runner", None))
        self.norm_input: Any = None
        self.hook = None
        if decoder is not None and len(decoder.layers) in self.aux_ids:  # until the model
            # shows that it emits the last id itself
            self.hook = decoder.norm.register_forward_pre_hook(self._record, with_kwargs=True)

    def _record(self, module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        self.norm_input = entering_state(module, args, kwargs)

    def in_schedule_order(self, states: list[Any], rows: int) -> list[Any]:
        """The step's rows in the order the driver scheduled their requests: the runner's
        order on V1; on V2, which sorts each step, by the step's own batch map
        (`model_runner_v2_rows`), or refused without it."""
        step_rows = StepRows.on(self.extension)
        if step_rows is not None:
            return step_rows.arrange(states, rows)
        if self.on_v2:
            raise CaptureUnsupported(
                f"{self.model_name}: vLLM's Model Runner V2 sorts each step's requests, and "
                "no step map attributes its rows (is model_runner_v2_rows excluded?)"
            )
        return states

    def states(self, aux: list[Any], num_tokens: int) -> list[Any]:
        """This step's states, one per requested id in the caller's order."""
        aux = list(aux)
        if len(aux) == len(self.aux_ids) - 1 and self.norm_input is not None:
            aux.append(self.norm_input)  # the model records aux states only before layers
        elif len(aux) == len(self.aux_ids) and self.hook is not None:
            self.hook.remove()  # the model emits the last id itself
            self.hook = None
        self.norm_input = None
        if len(aux) != len(self.aux_ids):
            raise CaptureUnsupported(
                f"{self.model_name}: {len(aux)} aux hidden states for vLLM ids {self.aux_ids}"
                + ("" if self.hook else " (and no decoder norm found to take the last one)")
            )
        for vllm_id, state in zip(self.aux_ids, aux, strict=True):
            if state.shape[0] != num_tokens:
                raise CaptureUnsupported(
                    f"{self.model_name}: aux id {vllm_id} has {state.shape[0]} rows for "
                    f"{num_tokens} tokens (a sharded, sequence-parallel state)"
                )
        return [aux[i] for i in self.slots]


def capture_forward(model: Any, *args: Any, **kwargs: Any) -> Any:
    """The model's own forward, which returns `(hidden_states, aux)` once aux layers are
    set (what vLLM's runner reads for EAGLE-3); the states go to the extension."""
    from vllm.distributed import get_pp_group, get_tp_group

    capture: Eagle3Capture = model._spec_compat_capture
    output = type(model).forward(model, *args, **kwargs)
    if not get_pp_group().is_last_rank:
        return output  # IntermediateTensors; the last rank stores
    if not isinstance(output, tuple):
        raise CaptureUnsupported(f"{capture.model_name}: the forward returned no aux states")
    hidden, aux = output
    positions = args[1] if len(args) > 1 else kwargs["positions"]
    rows = positions.shape[-1]
    states = capture.states(aux, rows)
    if get_tp_group().rank_in_group == 0:  # every rank computes the same states
        capture.extension._store_captured_states(capture.in_schedule_order(states, rows))
    return hidden


def probe(module: ModuleType) -> Verdict:
    extension = getattr(module, "HiddenStatesWorkerExtension", None)
    setup = getattr(extension, "_setup_hidden_states_capture", None)
    store = getattr(extension, "_store_captured_states", None)
    found = f"_setup_hidden_states_capture{signature_text(setup)}; " + (
        f"_store_captured_states{signature_text(store)}"
    )
    if setup is not None and store is not None:
        setup_args = list(signature(setup).parameters)[1:]
        store_args = list(signature(store).parameters)[1:]
        if setup_args == ["layer_ids"] and store_args == ["aux_hidden_states"]:
            return Verdict(
                Need.NEEDED, found, "the stock set-up binds its own copy of the decoder loop"
            )
    return Verdict(Need.UNKNOWN, found, "the stock capture set-up changed")


def wrap(original: Any) -> Any:
    def _setup_hidden_states_capture(self: Any, layer_ids: list[int]) -> None:
        model = self.model_runner.model
        self._layer_ids = frozenset(layer_ids)  # the stock attributes, for its other methods
        self._captured_states = None
        model._spec_compat_capture = Eagle3Capture(
            model, find_decoder(model), list(layer_ids), extension=self
        )
        model.forward = types.MethodType(capture_forward, model)

    return _setup_hidden_states_capture


PATCH = declare(
    __name__,
    side="worker",
    module=WORKER,
    target="HiddenStatesWorkerExtension._setup_hidden_states_capture",
    summary="worker: capture vLLM's own EAGLE-3 aux states, in the caller's layer order",
    before=("shm_transport_worker",),  # the stock class's method, which its subclass inherits
)
