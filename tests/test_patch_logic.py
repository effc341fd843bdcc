"""Fast tests of the decisions inside patches (no vLLM engine; real vLLM runs are in e2e/)."""

from __future__ import annotations

import re

import pytest

from spec_compat.models.support import UnsupportedModel, check_layer_ids
from spec_compat.patches import generate_checks, v04_batches_of_max_num_seqs
from spec_compat.patches.worker_eagle3_capture import CaptureUnsupported, Eagle3Capture


def eagle3_model(num_layers: int = 4, emits_last: bool = True):
    """A SupportsEagle3 model whose decoder records aux states as vLLM's do."""
    import torch
    from vllm.model_executor.models.interfaces import SupportsEagle3

    class Norm(torch.nn.Module):  # vLLM's RMSNorm call shape
        def forward(self, x, residual=None):
            return x if residual is None else (x + residual, x + residual)

    class Decoder(torch.nn.Module):
        aux_hidden_state_layers: tuple = ()

        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Identity() for _ in range(num_layers))
            self.norm = Norm()

        def forward(self, positions, hidden_states):
            aux, residual = [], torch.zeros_like(hidden_states)
            for idx in range(num_layers):
                if idx in self.aux_hidden_state_layers:  # vLLM <= 0.2x: before each layer
                    aux.append(hidden_states + residual)
                hidden_states, residual = hidden_states + idx + 1, residual
            if emits_last and num_layers in self.aux_hidden_state_layers:
                aux.append(hidden_states + residual)
            hidden_states, _ = self.norm(hidden_states, residual)
            return hidden_states, aux

    class Model(torch.nn.Module, SupportsEagle3):
        def __init__(self):
            super().__init__()
            self.model = Decoder()

        def set_aux_hidden_state_layers(self, layers):
            self.model.aux_hidden_state_layers = layers

    return Model()


def run_capture(model, layer_ids):
    import torch

    capture = Eagle3Capture(model, model.model, layer_ids)
    _, aux = model.model(None, torch.zeros(5, 2))
    return [int(s[0, 0]) for s in capture.states(aux, 5)], capture


@pytest.mark.parametrize("emits_last", [True, False])
def test_capture_returns_the_callers_order_with_repeats(emits_last):
    # layer k's output on the fake decoder is 1 + 2 + ... + (k + 1)
    model = eagle3_model(emits_last=emits_last)
    states, capture = run_capture(model, [3, 0, 2])
    assert model.model.aux_hidden_state_layers == (1, 3, 4)  # vLLM id = layer id + 1
    assert states == [10, 1, 6]
    # the final-norm hook stays only where the model does not emit the last id itself
    assert (capture.hook is None) is emits_last
    assert run_capture(eagle3_model(emits_last=emits_last), [2, 2, 1, 3])[0] == [6, 6, 3, 10]


def test_capture_refuses_what_it_cannot_serve():
    import torch

    class Plain(torch.nn.Module):
        pass

    with pytest.raises(CaptureUnsupported, match="Plain does not implement vLLM's SupportsEagle3"):
        Eagle3Capture(Plain(), None, [0])
    model = eagle3_model()
    capture = Eagle3Capture(model, model.model, [0, 1])
    with pytest.raises(CaptureUnsupported, match=r"1 aux hidden states for vLLM ids \(1, 2\)"):
        capture.states([torch.zeros(5, 2)], 5)
    with pytest.raises(CaptureUnsupported, match="3 rows for 5 tokens"):
        capture.states([torch.zeros(3, 2)] * 2, 5)
    last_only = Eagle3Capture(eagle3_model(), None, [3])  # no decoder: no final-norm hook
    with pytest.raises(CaptureUnsupported, match=r"\(4,\) \(and no decoder norm found"):
        last_only.states([], 5)


def test_layer_ids_are_refused_before_loading_with_what_to_pass():
    check_layer_ids(None, 4)
    check_layer_ids([3, 0, 2, 2], 4)
    with pytest.raises(UnsupportedModel, match=r"layer_ids=\[\] asks for no hidden states.*0\.\.3"):
        check_layer_ids([], 4)
    with pytest.raises(UnsupportedModel, match=r"\[1\.5\] not integers"):
        check_layer_ids([1.5, 2], 4)
    with pytest.raises(UnsupportedModel, match="pass a list of layer indices"):
        check_layer_ids("3", 4)
    assert issubclass(UnsupportedModel, ValueError)


def test_prompt_checks_name_the_prompt(caplog):
    check = generate_checks.check_prompts
    with pytest.raises(ValueError, match="no prompts"):
        check([], 100, 10)
    with pytest.raises(ValueError, match=r"prompt 1 of this generate\(\) call is empty"):
        check([[1], []], 100, 10)
    with pytest.raises(
        ValueError, match=r"prompt 0 of this generate\(\) call: token id 100 is outside .*0\.\.99"
    ):
        check([[1, 100]], 100, 10)
    with pytest.raises(ValueError, match="token id -1"):
        check([[-1]], 100, 10)
    check([list(range(12))], 100, 10)
    assert (
        "prompt 0 of this generate() call has 12 tokens; the stock extractor keeps the first 10"
        in caplog.text
    )


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
        "prompt 0 of this generate() call, layer 0: NaN/Inf in 1 values",
        "prompt 0 of this generate() call, layer 2: all-zero state at token(s) [2]",
        "prompt 1 of this generate() call, layer 0: 2 rows for 3 tokens",
        "prompt 1 of this generate() call: 1 layers for 2 requested",
    ]


def test_decoder_lookup_handles_every_wrapper_shape():
    from types import SimpleNamespace

    from spec_compat.models.decoder import find_decoder

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
    assert find_decoder(SimpleNamespace(model=SimpleNamespace())) is None


def test_tensor_parallel_size_refusals_name_the_value_and_the_fix(monkeypatch):
    import torch

    from spec_compat.patches import tensor_parallel_size_check as tp

    monkeypatch.setattr(torch.accelerator, "device_count", lambda: 0)
    with pytest.raises(ValueError, match=r"tensor_parallel_size=0 \(that is torch\.accelerator"):
        tp.check(0)
    for bad in (-1, "2", 1.0, True, None):
        with pytest.raises(ValueError, match="pass tensor_parallel_size=1"):
            tp.check(bad)
    monkeypatch.setattr(tp, "visible_gpus", lambda: 2)
    tp.check(2)
    with pytest.raises(ValueError, match="tensor_parallel_size=3 but 2 GPU"):
        tp.check(3)
    monkeypatch.setattr(tp, "visible_gpus", lambda: None)  # vLLM's CPU platform: any count
    tp.check(4)


def test_input_that_is_not_exactly_token_ids_is_refused_with_the_shape():
    import numpy as np
    import torch

    lists = generate_checks.token_lists
    assert lists([[1, 2], (3,)]) == [[1, 2], [3]]
    assert lists(torch.tensor([[5, 6, 7]])) == [[5, 6, 7]]
    assert lists([torch.tensor([5, 6]), np.array([7], dtype=np.int64)]) == [[5, 6], [7]]
    converted = lists([[np.int64(8), 9]])
    assert converted == [[8, 9]] and {type(t) for t in converted[0]} == {int}
    refused = {
        "integers, got 1.5 (float)": [[1.5, 2.7]],
        "integers, got 2.0 (float)": torch.tensor([[2.0]]),
        "got a 1-D tensor": torch.tensor([5, 6, 7]),
        "prompt 0 of this generate() call is int 5, not a list": [5, 6, 7],
        "generate() got None": None,
        "got a string: tokenize it first": "hello",
        "prompt 0 of this generate() call is a string: tokenize it first": ["hello"],
        "integers, got True": [[True, 2]],
    }
    for message, given in refused.items():
        with pytest.raises(ValueError, match=re.escape(message)) as caught:
            lists(given)
        assert "list[list[int]]" in str(caught.value)


def test_the_stock_del_is_quiet_only_while_the_interpreter_exits(monkeypatch):
    import sys

    from spec_compat.patches import generator_quiet_exit

    def stock_del(self):
        raise AttributeError("'NoneType' object has no attribute 'warning'")

    finalizing = [False]
    monkeypatch.setattr(sys, "is_finalizing", lambda: finalizing[0])
    quiet = generator_quiet_exit.wrap(stock_del)
    with pytest.raises(AttributeError):
        quiet(object())  # in a running program the stock behaviour stands
    finalizing[0] = True
    quiet(object())


def test_calls_are_cut_by_prompt_count_and_by_free_kv_blocks():
    cut = v04_batches_of_max_num_seqs.slices
    assert cut([10] * 5, 32, 100, [16]) == [range(0, 5)]
    assert cut([10] * 5, 2, 100, [16]) == [range(0, 2), range(2, 4), range(4, 5)]
    # 17 tokens take 2 blocks of 16; two KV groups (full + sliding) each take theirs
    assert cut([17, 17, 17], 32, 4, [16]) == [range(0, 2), range(2, 3)]
    assert cut([17, 17], 32, 4, [16, 16]) == [range(0, 1), range(1, 2)]
    # a prompt that alone needs more than is free goes alone: the stock call decides
    assert cut([5, 500, 5], 32, 4, [16]) == [range(0, 1), range(1, 2), range(2, 3)]


STOCK_SCHEDULER = """
from vllm.v1.core.sched.scheduler import Scheduler

VLLM_BLOCK_SIZE = 16


def build(vllm_config, kv_cache_config, som):
    return Scheduler(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                     structured_output_manager=som, block_size=VLLM_BLOCK_SIZE)
"""


@pytest.mark.parametrize("cpu", [True, False])
def test_a_constant_stock_block_size_is_replaced_on_every_platform(stock_module, monkeypatch, cpu):
    """speculators 0.4.x passes 16; a hybrid model's scheduler block is the LCM of its
    KV-cache groups' block sizes, which only the planned cache knows (the H200 run of vLLM
    0.26 failed in the coordinator's assertion while the probe said "not needed" there)."""
    import importlib

    from vllm.platforms import current_platform

    from spec_compat.engine.probes import Need
    from spec_compat.patches import scheduler_block_size

    monkeypatch.setattr(type(current_platform), "is_cpu", lambda self: cpu)
    verdict = scheduler_block_size.probe(importlib.import_module(stock_module(STOCK_SCHEDULER)))
    assert verdict.need is Need.NEEDED, verdict
    assert "stock block_size=16" in verdict.reason


STOCK_LAYER_COUNT = """
from transformers import AutoConfig


def count(model_path):
    config = AutoConfig.from_pretrained(model_path, trust_remote_code=True)
    if hasattr(config, "num_hidden_layers"):
        return config.num_hidden_layers
    elif hasattr(config, "text_config"):
        return config.text_config.num_hidden_layers
    raise ValueError("Cannot determine num_layers from config")
"""


def test_layers_are_counted_on_the_decoders_config_however_deep(stock_module, tmp_path):
    """An omni model's decoder is `thinker_config.text_config`: the stock count raises, the
    proxy hands it transformers' decoder config; a plain model's config is its own."""
    import importlib

    from transformers import AutoConfig, LlamaConfig, Qwen2_5OmniConfig

    from spec_compat.engine.probes import Need
    from spec_compat.patches import config_decoder_layers

    stock = importlib.import_module(stock_module(STOCK_LAYER_COUNT))
    assert config_decoder_layers.probe(stock).need is Need.NEEDED
    omni = Qwen2_5OmniConfig(thinker_config={"text_config": {"num_hidden_layers": 3}})
    omni.save_pretrained(tmp_path / "omni")
    LlamaConfig(num_hidden_layers=5).save_pretrained(tmp_path / "llama")
    with pytest.raises(ValueError, match="Cannot determine num_layers"):
        stock.count(tmp_path / "omni")
    stock.AutoConfig = config_decoder_layers.wrap(AutoConfig)
    assert stock.count(tmp_path / "omni") == 3
    assert stock.count(tmp_path / "llama") == 5


def test_a_stock_config_read_beyond_the_layer_count_is_unknown_drift(stock_module):
    import importlib

    from spec_compat.engine.probes import Need
    from spec_compat.patches import config_decoder_layers

    reads_more = STOCK_LAYER_COUNT.replace("    raise", "    print(config.vocab_size)\n    raise")
    verdict = config_decoder_layers.probe(importlib.import_module(stock_module(reads_more)))
    assert verdict.need is Need.UNKNOWN and "config.vocab_size" in verdict.found
    moved = STOCK_LAYER_COUNT.replace("AutoConfig.from_pretrained", "load_config")
    verdict = config_decoder_layers.probe(importlib.import_module(stock_module(moved)))
    assert verdict.need is Need.UNKNOWN


def test_the_hybrid_planner_state_comes_from_this_processs_registry(monkeypatch):
    """The model checks sit below the API: they read the planner's state from the registry
    the API named (`set_process_registry`), never by importing the facade."""
    from types import SimpleNamespace

    from spec_compat.api import REGISTRY
    from spec_compat.engine import registry
    from spec_compat.engine.patch import State
    from spec_compat.models.support import HYBRID_PLANNER, hybrid_kv_planned

    assert registry.process_registry() is REGISTRY

    def with_planner(state: State | None) -> SimpleNamespace:
        results = [] if state is None else [SimpleNamespace(name=HYBRID_PLANNER, state=state)]
        return SimpleNamespace(status=lambda: results)

    monkeypatch.setattr(registry, "_PROCESS", with_planner(None))
    assert hybrid_kv_planned() == (False, "not selected")
    monkeypatch.setattr(registry, "_PROCESS", with_planner(State.PENDING))
    assert hybrid_kv_planned() == (True, State.PENDING.value)
    monkeypatch.setattr(registry, "_PROCESS", with_planner(State.NOT_NEEDED))
    assert hybrid_kv_planned() == (False, State.NOT_NEEDED.value)
