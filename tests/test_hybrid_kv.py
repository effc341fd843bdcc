"""The hybrid KV-cache patches' decisions, on vLLM's real KV-cache spec classes (the engine
runs are in e2e/test_hybrid_models.py)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from spec_compat.patches import kv_cache_hybrid_groups as groups
from spec_compat.patches import kv_cache_hybrid_plan as plan
from spec_compat.patches import kv_cache_hybrid_unify as unify


def attention(block_size: int = 32):
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return FullAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=32,
                             dtype=torch.float32)  # fmt: skip


def mamba(block_size: int = 512):
    import torch
    from vllm.v1.kv_cache_interface import MambaSpec

    return MambaSpec(block_size=block_size, shapes=((4, 64), (8, 16, 16)),
                     dtypes=(torch.float32, torch.float32))  # fmt: skip


def hybrid_specs() -> dict:
    return {"layers.0.mixer": mamba(), "layers.1.attn": attention(), "layers.3.mixer": mamba()}


def test_uniform_specs_keep_the_stock_single_group():
    stock = []
    uniform = {"layers.0.attn": attention(), "layers.1.attn": attention()}
    replacement = groups.wrap(lambda specs: stock.append(specs) or "stock groups")
    assert replacement(uniform) == "stock groups" and stock == [uniform]


def test_hybrid_specs_become_one_group_per_layer_carrying_the_specs():
    specs = hybrid_specs()
    handed = groups.wrap(lambda specs: pytest.fail("the stock planner got hybrid specs"))(specs)
    assert isinstance(handed, groups.LayerSpecs)
    assert handed.specs == specs
    assert [(g.layer_names, g.kv_cache_spec) for g in handed] == [
        ([name], spec) for name, spec in specs.items()
    ]


def test_unify_keeps_what_vllm_can_unify_and_leaves_state_layers_alone():
    try:  # vLLM 0.33 moved it (kv_cache_planning_module)
        from vllm.v1.core.kv_cache_planning import unify_hybrid_kv_cache_specs
    except ImportError:
        from vllm.v1.core.kv_cache_utils import unify_hybrid_kv_cache_specs

    specs = hybrid_specs()
    with pytest.raises(ValueError):  # the stock failure this patch set exists for
        unify_hybrid_kv_cache_specs(dict(specs))
    unify.wrap(unify_hybrid_kv_cache_specs)(specs)
    assert specs == hybrid_specs()

    seen = []
    unify.wrap(seen.append)(specs)  # anything vLLM can unify goes through it as before
    assert seen == [specs]
    with pytest.raises(TypeError):  # only vLLM's "cannot unify" answers are absorbed
        unify.wrap(lambda specs: (_ for _ in ()).throw(TypeError("drift")))(specs)


def test_the_plan_regroups_with_vllms_planner_and_sets_the_engine_block_size(monkeypatch):
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec

    specs = hybrid_specs()
    planned = [
        KVCacheGroupSpec(["layers.1.attn"], attention(block_size=512)),
        KVCacheGroupSpec(["layers.0.mixer", "layers.3.mixer"], mamba()),
    ]
    asked = []
    monkeypatch.setattr(
        plan, "engine_planner", lambda: lambda cfg, s: asked.append((cfg, s)) or planned
    )
    config = SimpleNamespace(cache_config=SimpleNamespace(block_size=32))
    sized = []
    replacement = plan.wrap(lambda **kwargs: sized.append(kwargs) or "config")

    assert replacement(vllm_config=config, kv_cache_groups=groups.LayerSpecs(specs),
                       available_memory=1 << 20) == "config"  # fmt: skip
    assert asked == [(config, specs)]
    assert sized[0]["kv_cache_groups"] is planned and sized[0]["available_memory"] == 1 << 20
    assert config.cache_config.block_size == 512

    plain = [KVCacheGroupSpec(["layers.0.attn"], attention())]
    replacement(vllm_config=config, kv_cache_groups=plain, available_memory=1)
    assert sized[1]["kv_cache_groups"] is plain and len(asked) == 1  # the stock path


def test_the_engine_block_size_skips_groups_outside_prefix_caching():
    cacheable = SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=64))
    ring = SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=16, prefix_cacheable=False))
    assert plan.engine_block_size([cacheable, ring]) == 64
    assert plan.engine_block_size([ring]) == 16


def kv_cache_config(spec):
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec

    return KVCacheConfig(num_blocks=8, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(["layers.0.attn"], spec)])  # fmt: skip


def test_the_scheduler_gets_one_representative_spec_for_a_per_layer_group():
    """Gemma 4: sliding and full attention of different head sizes are one group of
    per-layer specs, which the workers allocate from and the scheduler cannot manage."""
    from vllm.v1.kv_cache_interface import UniformTypeKVCacheSpecs

    from spec_compat.patches import scheduler_kv_cache_view as view

    wide = dataclasses.replace(attention(), head_size=64)
    per_layer = UniformTypeKVCacheSpecs(
        block_size=32, kv_cache_specs={"layers.0.attn": attention(), "layers.1.attn": wide}
    )
    workers = kv_cache_config(per_layer)
    handed = view.wrap(lambda **kwargs: kwargs["kv_cache_config"])(kv_cache_config=workers)
    assert handed is not workers and workers.kv_cache_groups[0].kv_cache_spec is per_layer
    assert handed.kv_cache_groups[0].kv_cache_spec == attention()

    plain = kv_cache_config(attention())  # anything else is handed over as the same object
    assert view.wrap(lambda **kwargs: kwargs["kv_cache_config"])(kv_cache_config=plain) is plain
