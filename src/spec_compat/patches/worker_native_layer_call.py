"""Capture through the model's own forward wherever the stock decoder loop would differ.

Target: ``custom_worker._patched_forward`` (both speculators lines), in every vLLM worker.
Why: the stock patched forward re-implements the decoder loop as
    ``layer(hidden_states=..., positions=..., residual=...)`` and drops every other keyword
    it is given.  Native forwards pass more: DeepSeek-V2/V3 (Kimi-K2.5, Mistral Large 3)
    give each layer ``llama_4_scaling`` when the config has it, Qwen3-VL adds deepstack
    embeddings after the first layers for image prompts, Llama forwards
    ``extra_layer_kwargs``.  The stock loop then silently captures a different model.
How: per call, the decoder class's own ``forward`` is read once (AST): when every layer call
    is exactly the stock three arguments and the call carries no extra keywords, the stock
    forward runs unchanged.  Otherwise the decoder's *own* forward runs, with forward
    pre-hooks on the module after each captured layer (the next layer, or the final norm
    for the last one) recording ``hidden_states + residual`` as it enters: vLLM's own
    aux-hidden-state convention, i.e. the stock capture for plain models.  A layer whose
    call cannot be read, or a state that is not one row per token (sequence-parallel
    shards), raises ``CaptureUnsupported`` naming the model instead of guessing.
Upstream change: vLLM 0.2x DeepSeek ``llama_4_scaling``; Qwen3-VL deepstack (0.11+).
Remove when: speculators captures through vLLM's native aux hidden states.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from types import ModuleType
from typing import Any

from ..gates import Need, Verdict, stock_calls
from ..registry import Patch
from ._stock import WORKER

STOCK_LAYER_ARGS = frozenset({"hidden_states", "positions", "residual"})
#: the decoder-forward arguments the stock forward takes; anything else it drops
STOCK_FORWARD_ARGS = frozenset({"input_ids", "positions", "intermediate_tensors", "inputs_embeds"})


class CaptureUnsupported(RuntimeError):
    """The model's forward has a shape the capture cannot reproduce exactly."""


@functools.cache
def layer_call_extras(decoder_cls: type) -> tuple[str, ...]:
    """What `decoder_cls.forward` passes its layers beyond the stock three arguments.

    `**name` entries forward the forward's own keyword arguments: they matter only when
    the call carries some.  Raises CaptureUnsupported when no layer call can be found.
    """
    try:
        source = textwrap.dedent(inspect.getsource(decoder_cls.forward))
    except (OSError, TypeError) as exc:
        raise CaptureUnsupported(
            f"{decoder_cls.__name__}.forward: source unavailable ({exc})"
        ) from exc
    func = ast.parse(source).body[0]
    layer_names = set()
    for node in ast.walk(func):  # names bound to one layer: `for ... layer in ...self.layers`
        if isinstance(node, ast.For) and "self.layers" in ast.unparse(node.iter):
            layer_names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Assign) and "self.layers[" in ast.unparse(node.value):
            layer_names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    calls = [
        node
        for node in ast.walk(func)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in layer_names
    ]
    if not calls:
        raise CaptureUnsupported(
            f"{decoder_cls.__name__}.forward: no call of a decoder layer found"
        )
    extras: list[str] = []
    for call in calls:
        if len(call.args) > len(STOCK_LAYER_ARGS) or any(
            isinstance(a, ast.Starred) for a in call.args
        ):
            extras.append(f"positional arguments: {ast.unparse(call)}")
        for kw in call.keywords:
            if kw.arg is None:
                extras.append(f"**{ast.unparse(kw.value)}")
            elif kw.arg not in STOCK_LAYER_ARGS:
                extras.append(kw.arg)
    return tuple(dict.fromkeys(extras))


def extra_inputs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keywords of this call the stock forward would drop (deepstack embeddings...)."""
    return {k: v for k, v in kwargs.items() if k not in STOCK_FORWARD_ARGS and v is not None}


def needs_native_forward(decoder: Any, kwargs: dict[str, Any]) -> bool:
    static = [e for e in layer_call_extras(type(decoder)) if not e.startswith("**")]
    return bool(static or extra_inputs(kwargs))


@functools.cache
def _forward_signature(module_cls: type) -> inspect.Signature:
    """The named signature of a call: vLLM's custom ops (RMSNorm) take `*args, **kwargs`
    in `forward` and dispatch to `forward_native(x, residual)`."""
    for name in ("forward", "forward_native"):
        signature = inspect.signature(getattr(module_cls, name, None) or module_cls.forward)
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        if any(p.kind not in variadic for p in list(signature.parameters.values())[1:]):
            return signature
    return inspect.signature(module_cls.forward)


def entering_state(module: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    """`hidden_states + residual` as a call of `module` (a layer or a norm) receives them."""
    bound = _forward_signature(type(module)).bind(module, *args, **kwargs).arguments
    hidden = bound.get("hidden_states", bound.get("x"))
    if hidden is None:
        raise CaptureUnsupported(
            f"cannot find the hidden states in a call of {type(module).__name__}"
            f"{_forward_signature(type(module))}"
        )
    residual = bound.get("residual")
    return hidden if residual is None else hidden + residual


class Taps:
    """Pre-hooks recording each captured layer's output as it enters the next module."""

    def __init__(self, decoder: Any, layer_ids: frozenset[int]):
        self.sink: list[Any] | None = None
        self.num_tokens = 0
        start, end = decoder.start_layer, decoder.end_layer
        self.layer_ids = sorted(k for k in layer_ids if start <= k < end)
        for k in self.layer_ids:  # registered for the decoder's lifetime, like the stock forward
            entered = decoder.layers[k + 1] if k + 1 < end else decoder.norm
            entered.register_forward_pre_hook(functools.partial(self._record, k), with_kwargs=True)

    def _record(self, layer_id: int, module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        if self.sink is None:
            return
        state = entering_state(module, args, kwargs)
        if state.shape[0] != self.num_tokens:
            raise CaptureUnsupported(
                f"layer {layer_id}: {state.shape[0]} rows for {self.num_tokens} tokens "
                "(a sharded, sequence-parallel state); capture would be wrong"
            )
        self.sink.append(state)


def native_forward(decoder: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
    from vllm.distributed import get_pp_group, get_tp_group

    extension = decoder._extension
    taps = decoder.__dict__.get("_spec_compat_taps")
    if taps is None:
        taps = decoder.__dict__["_spec_compat_taps"] = Taps(decoder, extension._layer_ids)
    capture = get_tp_group().rank_in_group == 0
    positions = args[1] if len(args) > 1 else kwargs["positions"]
    taps.sink, taps.num_tokens = ([] if capture else None), positions.shape[-1]
    try:
        output = type(decoder).forward(decoder, *args, **kwargs)
        captured = taps.sink
    finally:
        taps.sink = None
    if captured is not None and len(captured) != len(taps.layer_ids):
        raise CaptureUnsupported(
            f"{type(decoder).__name__}: captured {len(captured)} of layers {taps.layer_ids}"
        )
    if captured and get_pp_group().is_last_rank:
        extension._store_captured_states(captured)
    return output


def probe(module: ModuleType) -> Verdict:
    calls = stock_calls(module, "layer")
    found = "; ".join(f"line {c.line}: layer(**{sorted(c.keywords)})" for c in calls)
    if calls and all(c.n_positional == 0 and c.keywords == STOCK_LAYER_ARGS for c in calls):
        return Verdict(
            Need.NEEDED,
            found,
            "the stock forward passes layers only (hidden_states, positions, residual)",
        )
    return Verdict(Need.UNKNOWN, found or "no layer call", "the stock decoder loop changed")


def wrap(original: Any) -> Any:
    @functools.wraps(original)
    def _patched_forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if needs_native_forward(self, kwargs):
            return native_forward(self, args, kwargs)
        stock_kwargs = {k: v for k, v in kwargs.items() if k in STOCK_FORWARD_ARGS}
        return original(self, *args, **stock_kwargs)

    return _patched_forward


PATCH = Patch(
    name="worker_native_layer_call",
    side="worker",
    module=WORKER,
    target="_patched_forward",
    summary="worker: capture through the model's own forward when its layers take more args",
    probe=probe,
    wrap=wrap,
)
