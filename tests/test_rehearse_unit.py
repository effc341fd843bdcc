"""The rehearsal's pieces that need no engine: the shrunken copy's config, the layer
mapping, the prompts and the refusals that come before anything loads."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from spec_compat.rehearse import command as rehearse
from spec_compat.rehearse import miniature

transformers = pytest.importorskip("transformers")


def example(name: str) -> dict:
    return json.loads((rehearse.EXAMPLES / name / "config.json").read_text())


def test_the_copy_keeps_head_size_ratio_experts_and_vocabulary():
    config, notes = miniature.shrink(example("qwen3-30b-a3b"))
    assert config.num_hidden_layers == miniature.LAYERS
    assert config.head_dim == 128  # the kernel sees the real head size
    assert config.num_attention_heads // config.num_key_value_heads == 4  # 32/4 -> 8/2
    assert (config.num_experts, config.num_experts_per_tok) == (128, 8)
    assert config.vocab_size == 151936
    assert config.hidden_size == miniature.WIDTH
    assert "48 -> 4 layers" in notes[-1]


def test_the_copy_keeps_mla_ranks_and_routing_and_drops_quantisation():
    config, notes = miniature.shrink(example("deepseek-v3"))
    assert (config.kv_lora_rank, config.q_lora_rank, config.qk_rope_head_dim) == (512, 1536, 64)
    assert (config.n_routed_experts, config.n_group, config.topk_group) == (256, 8, 4)
    assert config.first_k_dense_replace == 3  # three dense layers, then experts
    assert not hasattr(config, "quantization_config") or not config.quantization_config
    assert any("quantization_config" in note for note in notes)


def test_routed_experts_are_found_whatever_the_family_calls_them():
    routed = {
        name: miniature.routes_experts(miniature.shrink(example(name))[0].get_text_config())
        for name in rehearse.examples()
    }
    assert routed == {
        "llama-3.1-8b": False,
        "qwen3-8b": False,
        "qwen3-30b-a3b": True,  # num_experts
        "deepseek-v3": True,  # n_routed_experts
        "kimi-k2.5-text": True,
    }


def test_heads_stay_divisible_by_the_tensor_parallel_size():
    config, _ = miniature.shrink(example("llama-3.1-8b"), tensor_parallel_size=4)
    assert config.num_attention_heads % 4 == 0 and config.num_key_value_heads % 4 == 0


def test_per_layer_lists_follow_the_depth():
    raw = example("qwen3-8b") | {"layer_types": ["full_attention"] * 36}
    config, _ = miniature.shrink(raw)
    assert config.layer_types == ["full_attention"] * miniature.LAYERS


def test_the_copy_keeps_a_layer_of_every_kind_the_model_has():
    """A kind first seen deep in the model (Nemotron-H's attention after six state and MLP
    layers) is kept, so the copy plans the KV cache the model needs."""
    assert miniature.kept_layers([list("M-M-M-M*-M-")], 4) == [0, 1, 2, 7]
    assert miniature.kept_layers([["full_attention"] * 36], 4) == [0, 1, 2, 3]


def test_per_layer_overrides_follow_their_layers():
    """Gemma 4 (transformers 5): the full-attention layers' own head size is a per-layer
    override, keyed by layer index; the copy keeps one such layer, with its override."""
    gemma4 = getattr(transformers, "Gemma4TextConfig", None)
    if gemma4 is None:
        pytest.skip(f"transformers {transformers.__version__} has no Gemma 4")
    raw = gemma4(num_hidden_layers=30).to_dict() | {"architectures": ["Gemma4ForCausalLM"]}
    assert raw["per_layer_config"]["05"] == {"head_dim": 512}
    config, _ = miniature.shrink(raw)
    saved = config.to_dict()
    assert saved["layer_types"] == ["sliding_attention"] * 3 + ["full_attention"]
    assert saved["per_layer_config"] == {"3": {"head_dim": 512}}
    assert "allow_global_per_layer_attribute_access" not in saved


def test_layer_ids_keep_their_relative_depth_and_the_last_layer():
    copy = miniature.Miniature(
        rehearse.EXAMPLES, "X", layers=32, mla=False, routed_experts=False, prompt_vocab=10
    )
    assert copy.map_layers([2, 16, 29, 31]) == [0, 2, 3, 3]
    assert copy.map_layers([31, 0]) == [3, 0]  # the caller's order


def test_prompts_cross_the_stock_scheduler_step():
    prompts = rehearse.prompts_for(vocab=1000, max_model_len=2048)
    assert sum(map(len, prompts)) > rehearse.STOCK_STEP_TOKENS
    assert all(len(p) < 2048 and all(4 <= t < 1000 for t in p) for p in prompts)


def test_a_path_without_config_json_exits_2_at_once(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "spec_compat", "rehearse", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert "no config.json" in report["error"] and "llama-3.1-8b" in report["error"]


def test_every_shipped_example_is_listed():
    names = rehearse.examples()
    assert {"llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b", "deepseek-v3", "kimi-k2.5-text"} <= set(
        names
    )


def composite_configs() -> list:
    """Every transformers config class whose parts include a decoder and something else."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    found = []
    for model_type in sorted(CONFIG_MAPPING.keys()):
        cls = CONFIG_MAPPING[model_type]
        declared = getattr(cls, "sub_configs", None)  # a property in transformers 4.57
        if isinstance(declared, dict) and "text_config" not in declared:
            continue
        try:
            config = cls()
        except Exception:  # a class that needs arguments: no default
            continue
        if "text_config" in (getattr(config, "sub_configs", None) or {}):
            found.append(config)
    return found


def test_every_tower_shrinks_and_the_decoder_stays_as_configured():
    configs = composite_configs()
    assert len(configs) > 20, "transformers' composite configs were not found"
    for config in configs:
        text = config.get_text_config()
        before = text.to_dict()
        miniature.shrink_towers(config)
        assert text.to_dict() == before, type(config).__name__
        for name, part in miniature._parts(config):
            if part is text:
                continue
            sized = any(miniature._int(part, key) for key in miniature.TOWER_WIDTH_KEYS)
            for key in miniature.TOWER_HEAD_KEYS:  # heads shrink where the width is known
                if sized and miniature._int(part, key):
                    assert getattr(part, key) == miniature.TOWER_HEADS, (type(config), name)
            for key in miniature.TOWER_OUT_KEYS:
                if miniature._int(part, key):
                    assert getattr(part, key) == text.hidden_size, (type(config), name, key)


def test_a_wrapper_copy_keeps_tower_depth_and_feature_layers():
    from transformers import Qwen3VLConfig

    config, notes = miniature.shrink(Qwen3VLConfig().to_dict())
    vision = config.vision_config
    assert (vision.depth, vision.deepstack_visual_indexes) == (27, [8, 16, 24])
    assert (vision.num_heads, vision.hidden_size) == (2, 2 * 1152 // 16)
    assert vision.out_hidden_size == config.text_config.hidden_size == miniature.WIDTH
    assert any(note.startswith("vision_config: 2 heads") for note in notes)


def test_layer_pattern_strings_follow_the_depth():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if "nemotron_h" not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no Nemotron-H")
    raw = {"model_type": "nemotron_h", "hybrid_override_pattern": "M-M*-M-M*"}
    config, _ = miniature.shrink(raw)
    assert config.hybrid_override_pattern == "M-M*"


def told_apart(monkeypatch, tmp_path, alone_off: float, batched_off: float):
    """`_tell_apart` on stand-in children: vLLM's own states are ones; the extraction, each
    prompt alone, is `alone_off` from them; the batched one `batched_off`."""
    import torch

    from spec_compat.rehearse import rehearsal

    prompts = [[5, 6, 7], [8, 9]]
    ones = [[torch.ones(len(p), 4)] for p in prompts]

    def results(off):
        return [
            {"input_ids": torch.tensor(p), "hidden_states": [s[0] + off]}
            for p, s in zip(prompts, ones, strict=True)
        ]

    class Standin:
        def __init__(self, mode):
            self.mode = mode

        def run(self, spec):
            assert spec["calls"] == [[0], [1]]  # each prompt alone, as vLLM's own engine

        def finish(self, report):
            return {"results": results(alone_off)} if self.mode == "extract" else ones

        def stop(self):
            pass

    report = rehearsal.Rehearsal(model="m", max_relative_error=2e-4)
    report.layer_ids = {"rehearsed": [3]}
    report.steps.append(rehearsal.Step("compare", 0.0, "", ok=False))
    spec = {"prompts": prompts, "calls": [[0, 1]]}
    tmp_path.mkdir()
    monkeypatch.setattr(rehearsal.Child, "start", classmethod(lambda cls, mode, _: Standin(mode)))
    rehearse._tell_apart(spec, results(batched_off), tmp_path, report, [])
    return report


def test_vllms_forward_is_told_apart_from_the_capture_only_when_bitwise_alone(
    monkeypatch, tmp_path
):
    """A transformers gap is put down to vLLM's forward only where the extraction, each
    prompt alone, equals vLLM's own aux states bitwise, and the batched run lies within
    BATCH_NOISE of them; anything else stays a failure that names the capture."""
    from spec_compat.rehearse.rehearsal import BATCH_NOISE, Stop

    report = told_apart(monkeypatch, tmp_path / "a", 0.0, BATCH_NOISE / 10)
    assert report.reference.startswith("transformers (float32): 2.0e-04 off")
    assert report.steps[0].ok
    with pytest.raises(Stop, match="the capture"):
        told_apart(monkeypatch, tmp_path / "b", 1e-7, 0.0)
    with pytest.raises(Stop, match="batched extraction is"):
        told_apart(monkeypatch, tmp_path / "c", 0.0, BATCH_NOISE * 5)
