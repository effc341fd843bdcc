"""The seeded load format (spec_compat.rehearse.seeded_weights): values from each tensor's
name alone, registered with vLLM's loaders, and the stock generator's LoadConfig naming it."""

from __future__ import annotations

import types

import pytest

from spec_compat.rehearse import seeded_weights

torch = pytest.importorskip("torch")


def tiny_model():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    model.register_buffer("steps", torch.zeros(3, dtype=torch.long))  # not floating: kept
    return model


def test_values_depend_on_the_name_only_and_move_the_state():
    a, b = tiny_model(), tiny_model()
    seeded_weights.fill(a)
    seeded_weights.fill(b)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    weight, norm = a[0].weight, a[1].weight
    assert not torch.equal(weight[:8], weight[8:])  # unlike vLLM's "dummy": rows differ
    assert weight.abs().max() <= 1 / 8**0.5
    assert (norm - 1).abs().max() <= 0.1 and not torch.equal(norm, torch.ones(16))
    assert torch.equal(a.steps, torch.zeros(3, dtype=torch.long))
    assert seeded_weights.seeded("x.weight", (4, 4)).dtype == torch.float32


def test_the_format_is_registered_with_vllms_loaders_and_named_by_the_stock_load_config(
    monkeypatch,
):
    pytest.importorskip("vllm")
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader import get_model_loader

    monkeypatch.delenv(seeded_weights.ENV, raising=False)
    stock = types.SimpleNamespace(LoadConfig=LoadConfig)
    seeded_weights.use(stock)
    config = stock.LoadConfig()
    assert config.load_format == seeded_weights.LOAD_FORMAT
    loader = get_model_loader(config)
    model = tiny_model()
    loader.load_weights(model, None)
    assert torch.equal(model[0].bias, seeded_weights.seeded("0.bias", (16,)))
    import os

    assert os.environ[seeded_weights.ENV] == "1"  # children register it too
