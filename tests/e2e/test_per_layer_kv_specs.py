"""Gemma 4 through the unchanged stock extractor: its sliding and full attention layers have
different head sizes, which vLLM plans as one KV-cache group of per-layer specs
(`UniformTypeKVCacheSpecs`).  The workers allocate from those specs; the scheduler needs one
representative spec (patch scheduler_kv_cache_view, as `EngineCore` does).  The sweep proves
the states of every Gemma 4 class (CORE holds Gemma4ForCausalLM); this proves the patch is
what makes them run."""

from __future__ import annotations

import json

import pytest

from .harness import compare, native_reference, run_stock
from .sweep import build

pytestmark = [pytest.mark.e2e, pytest.mark.exhaustive]

PATCH = "scheduler_kv_cache_view"


@pytest.fixture
def gemma4(tmp_path):
    """The sweep's tiny Gemma4ForCausalLM (its full layer keeps a head size of its own)."""
    model = build("Gemma4ForCausalLM", tmp_path / "model")
    assert json.loads((model / "config.json").read_text())["per_layer_config"]
    return model


def test_per_layer_kv_specs_run_only_with_the_schedulers_view(speculators_dir, gemma4):
    prompts, layers = [[1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11]], [0, 3]
    run = run_stock(speculators_dir, gemma4, prompts, layers)
    reference = native_reference(gemma4, prompts, layers)
    assert compare(run.results[0], prompts, reference, tolerance=0.0) == 0.0

    stock = run_stock(
        speculators_dir, gemma4, prompts, layers, exclude=[PATCH, "capture_model_check"]
    )
    assert stock.data is None, "the stock scheduler ran per-layer KV-cache specs"
    assert "No manager registered for KVCacheSpec" in stock.log, stock.tail
