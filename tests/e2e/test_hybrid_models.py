"""Hybrid models (attention beside Mamba-2 / Gated DeltaNet state) through the unchanged stock
extractor: their KV cache is planned as several groups, as vLLM's engine core plans it
(patches kv_cache_hybrid_unify / _groups / _plan), and their states are bitwise vLLM's own
EAGLE-3 aux hidden states in the same dtype.

vLLM's CPU Gated DeltaNet kernel takes bf16 only, so these rehearsals run in bf16 on both
sides; each prompt runs alone (a state layer rounds its carried state where a step cuts a
prompt, so a cut prompt is compared with a reference cut at the same tokens:
`--max-num-batched-tokens`, speculators 0.4.x)."""

from __future__ import annotations

import json

import pytest

from spec_compat.rehearse import miniature

from .harness import run_stock
from .test_rehearse import rehearse, step_names

pytestmark = [pytest.mark.e2e, pytest.mark.exhaustive]

HYBRID_PATCHES = ("kv_cache_hybrid_unify", "kv_cache_hybrid_groups", "kv_cache_hybrid_plan")


def qwen3_next() -> dict:
    """Gated DeltaNet layers with a full-attention layer every 4th, routed experts."""
    from transformers import Qwen3NextConfig

    return Qwen3NextConfig(num_hidden_layers=4, full_attention_interval=4, num_experts=8,
                           num_experts_per_tok=2).to_dict()  # fmt: skip


def nemotron_h() -> dict:
    """Mamba-2, attention and MLP layers (no experts)."""
    from transformers import NemotronHConfig

    return NemotronHConfig(
        layers_block_type=["mamba", "attention", "mlp", "mamba"], hidden_size=128,
        intermediate_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, vocab_size=1024,
    ).to_dict()  # fmt: skip


FAMILIES = {
    "Qwen3NextForCausalLM": qwen3_next,
    "NemotronHForCausalLM": nemotron_h,
}


@pytest.fixture(params=sorted(FAMILIES))
def hybrid_model(request, tmp_path):
    config = FAMILIES[request.param]() | {"architectures": [request.param]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_hybrid_model_is_bitwise_vllms_own_states(speculators_dir, hybrid_model):
    code, report = rehearse(speculators_dir, str(hybrid_model), "--max-model-len", "2048")
    assert code == 0, report["error"]
    assert report["reference"] == "vLLM's own EAGLE-3 aux hidden states (bfloat16; hybrid)"
    assert report["max_relative_error"] == 0.0


@pytest.mark.parametrize("step", [256])
def test_prompts_cut_across_steps_carry_their_state_exactly(speculators_dir, line, step, tmp_path):
    """Prompts of up to 1,500 tokens in steps of `step` tokens: each state layer carries
    its state from step to step as vLLM's own engine does at the same step size."""
    if line == "0.3.0":
        pytest.skip("speculators 0.3.0's generator has no max_num_batched_tokens")
    config = qwen3_next() | {"architectures": ["Qwen3NextForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, report = rehearse(
        speculators_dir, str(tmp_path), "--max-model-len", "2048",
        "--max-num-batched-tokens", str(step),
    )  # fmt: skip
    assert code == 0, report["error"]
    assert report["max_relative_error"] == 0.0


def test_without_the_hybrid_planner_it_is_refused_before_loading(speculators_dir, tmp_path):
    config = qwen3_next() | {"architectures": ["Qwen3NextForCausalLM"]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, report = rehearse(
        speculators_dir, str(tmp_path), env={"SPEC_COMPAT_EXCLUDE": "kv_cache_hybrid_plan"}
    )
    assert code == 1, report
    assert "kv_cache_hybrid_plan" in report["error"]
    assert step_names(report) == ["read config", "route"]  # nothing built, nothing loaded


def test_the_stock_planner_fails_on_a_hybrid_model(speculators_dir, tmp_path):
    """What the three patches fix: with them (and the pre-load check) excluded, the stock
    extractor loads the model and then fails planning one uniform KV-cache group."""
    (tmp_path / "source").mkdir()
    config = nemotron_h() | {"architectures": ["NemotronHForCausalLM"]}
    (tmp_path / "source" / "config.json").write_text(json.dumps(config))
    model = miniature.build(tmp_path / "source", tmp_path / "model").directory
    run = run_stock(
        speculators_dir, model, [[1, 2, 3, 4, 5, 6, 7, 8]], [0, 3],
        exclude=[*HYBRID_PATCHES, "capture_model_check"],
        extra={"model_options": {"dtype": "bfloat16"}},
    )  # fmt: skip
    assert run.data is None, "the stock planner ran a hybrid model"
    assert "Failed to promote local KV cache specs to one unified type" in run.log, run.tail
