"""Fast tests of the decisions inside patches (no vLLM engine; real vLLM runs are in e2e/)."""

from __future__ import annotations

import pytest

from spec_compat.patches import generate_checks
from spec_compat.patches.worker_native_layer_call import (
    CaptureUnsupported,
    layer_call_extras,
    needs_native_forward,
)


class Decoder:  # the stock loop's shape: (positions, hidden_states, residual) only
    layers: tuple = ()

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        hidden_states, residual = inputs_embeds, None
        for layer in self.layers:
            hidden_states, residual = layer(positions, hidden_states, residual)
        return hidden_states


class ScaledDecoder(Decoder):  # DeepSeek-V2 with llama_4_scaling
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        hidden_states, residual, scaling = inputs_embeds, None, positions
        for _idx, layer in enumerate(self.layers):
            hidden_states, residual = layer(positions, hidden_states, residual, scaling)
        return hidden_states


class IndexedDecoder(Decoder):  # gpt-oss: `layer = self.layers[i]`, keyword extras forwarded
    def forward(self, input_ids, positions, intermediate_tensors=None, **extra):
        x, residual = input_ids, None
        for i in range(len(self.layers)):
            layer = self.layers[i]
            x, residual = layer(x, positions, residual, **extra)
        return x


class NoLayers(Decoder):
    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        return self.mixer(input_ids)


def test_layer_call_extras_reads_the_native_loop():
    assert layer_call_extras(Decoder) == ()
    assert layer_call_extras(ScaledDecoder)[0].startswith("positional arguments:")
    assert layer_call_extras(IndexedDecoder) == ("**extra",)
    with pytest.raises(CaptureUnsupported, match=r"NoLayers\.forward: no call of a decoder layer"):
        layer_call_extras(NoLayers)


def test_native_forward_only_where_the_stock_loop_would_differ():
    assert not needs_native_forward(Decoder(), {"inputs_embeds": object()})
    assert needs_native_forward(ScaledDecoder(), {})
    # forwarded keywords matter only when the call carries some (deepstack embeddings)
    assert not needs_native_forward(IndexedDecoder(), {"deepstack_input_embeds": None})
    assert needs_native_forward(IndexedDecoder(), {"deepstack_input_embeds": object()})


def test_prompt_checks_name_the_prompt(caplog):
    check = generate_checks.check_prompts
    with pytest.raises(ValueError, match="no prompts"):
        check([], 100, 10)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        check([[1], []], 100, 10)
    with pytest.raises(ValueError, match=r"prompt 0: token id 100 is outside .*0\.\.99"):
        check([[1, 100]], 100, 10)
    with pytest.raises(ValueError, match="token id -1"):
        check([[-1]], 100, 10)
    check([list(range(12))], 100, 10)
    assert "prompt 0 has 12 tokens; the stock extractor keeps the first 10" in caplog.text


def test_state_checks_find_nan_zero_rows_and_short_captures():
    import torch

    good = {"input_ids": torch.arange(3), "hidden_states": [torch.ones(3, 4), torch.ones(3, 4)]}
    assert generate_checks.problems_in([good], [0, 2]) == []
    nan = torch.ones(3, 4)
    nan[1, 2] = float("nan")
    zero = torch.ones(3, 4)
    zero[2] = 0
    bad = [
        {"input_ids": torch.arange(3), "hidden_states": [nan, zero]},
        {"input_ids": torch.arange(3), "hidden_states": [torch.ones(2, 4)]},
    ]
    assert generate_checks.problems_in(bad, [0, 2]) == [
        "prompt 0, layer 0: NaN/Inf in 1 values",
        "prompt 0, layer 2: all-zero state at token(s) [2]",
        "prompt 1, layer 0: 2 rows for 3 tokens",
        "prompt 1: 1 layers for 2 requested",
    ]


def test_decoder_lookup_handles_every_wrapper_shape():
    from types import ModuleType, SimpleNamespace

    from spec_compat.patches.worker_language_model import find_decoder, stock_decoder

    def decoder():
        return SimpleNamespace(layers=(), norm=None)

    text = SimpleNamespace(model=decoder())
    llava = SimpleNamespace(language_model=SimpleNamespace(model=decoder()))
    llava.get_language_model = lambda: llava.language_model
    kimi_015 = SimpleNamespace(language_model=decoder())  # get_language_model() is the decoder
    kimi_015.get_language_model = lambda: kimi_015.language_model
    assert find_decoder(text) is text.model
    assert find_decoder(llava) is llava.language_model.model
    assert find_decoder(kimi_015) is kimi_015.language_model
    with pytest.raises(ValueError, match="no reachable decoder layers"):
        find_decoder(SimpleNamespace(model=SimpleNamespace()))

    line_04 = ModuleType("custom_worker_04")  # 0.4.x: get_language_model().model
    assert stock_decoder(llava, line_04) is find_decoder(llava)  # the stock method runs
    assert stock_decoder(kimi_015, line_04) is None  # the stock method would raise
    line_030 = ModuleType("custom_worker_030")
    line_030.supports_eagle3 = lambda model: model is text
    assert stock_decoder(text, line_030) is text.model
    assert stock_decoder(llava, line_030) is None
