"""Tiny random models and a local tokenizer, built in seconds with no model hub.

The tokenizer is a byte-level BPE trained on Python's own standard-library sources; the
models are random float32 checkpoints saved as safetensors (see
shared/docs/cpu-runtime-findings.md, 'A tiny model that needs no hub').
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from pathlib import Path

from spec_compat.rehearse.miniature import TOKENIZER_VOCAB as VOCAB
from spec_compat.rehearse.miniature import build_tokenizer

TEXT = {
    "vocab_size": VOCAB,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
#: token ids 0-3 are special (<unk>, <s>, </s>, <image>); prompts use the rest
IMAGE_TOKEN = 3
FIRST_PROMPT_ID = 4


@functools.cache
def _trained_tokenizer() -> Path:
    """The tokenizer, trained once per process (seconds) and copied into each model."""
    directory = Path(tempfile.mkdtemp(prefix="spec-compat-tokenizer-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    build_tokenizer(directory)
    return directory


def _start(directory: Path, seed: int) -> None:
    """A model directory with the shared tokenizer, and torch seeded for its weights."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(_trained_tokenizer(), directory, dirs_exist_ok=True)
    torch.manual_seed(seed)


def _save(model, directory: Path, config_edit=None) -> Path:
    import torch

    model.to(torch.float32).save_pretrained(directory, safe_serialization=True)
    config_path = directory / "config.json"
    data = json.loads(config_path.read_text())
    data["torch_dtype"] = "float32"
    if config_edit is not None:
        config_edit(data)
    config_path.write_text(json.dumps(data, indent=2))
    return directory


def build_llama(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    _start(directory, seed)
    return _save(LlamaForCausalLM(LlamaConfig(num_hidden_layers=layers, **TEXT)), directory)


#: token ids whose embedding rows the broken Llama zeroes / fills with NaN
ZERO_TOKEN, NAN_TOKEN = 5, 6


def build_broken_llama(directory: Path) -> Path:
    """The tiny Llama with a zero and a NaN embedding row: what a damaged checkpoint or a
    half-precision overflow hands the extractor (all-zero / NaN hidden states)."""
    import torch
    from transformers import LlamaForCausalLM

    build_llama(directory)
    model = LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32)
    with torch.no_grad():
        model.model.embed_tokens.weight[ZERO_TOKEN] = 0.0
        model.model.embed_tokens.weight[NAN_TOKEN] = float("nan")
    return _save(model, directory)


def build_qwen3(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    _start(directory, seed)
    config = Qwen3Config(num_hidden_layers=layers, head_dim=32, **TEXT)
    return _save(Qwen3ForCausalLM(config), directory)


def build_llava(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    """A tiny Llava: a small CLIP vision tower around the tiny Llama text stack."""
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    _start(directory, seed)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
            projection_dim=32,
        ),
        text_config=LlamaConfig(num_hidden_layers=layers, **TEXT),
        image_token_index=IMAGE_TOKEN,
    )

    def text_architecture(data: dict) -> None:
        data["text_config"]["architectures"] = ["LlamaForCausalLM"]
        data["text_config"]["torch_dtype"] = "float32"

    from transformers import AutoTokenizer, CLIPImageProcessor, LlavaProcessor

    image_processor = CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    LlavaProcessor(
        image_processor=image_processor,
        tokenizer=AutoTokenizer.from_pretrained(directory),
        patch_size=8,
        num_additional_image_tokens=1,  # CLIP's class token, as vLLM counts it
        vision_feature_select_strategy="default",
        image_token="<image>",
    ).save_pretrained(directory)
    _save(LlavaForConditionalGeneration(config), directory, text_architecture)
    # transformers 5 saves CLIP's tower without its `vision_model` level; the released Llava
    # checkpoints (llava-hf/*), which vLLM's loader maps, have it, and transformers 5 reads
    # both: write the released layout, what users load
    return _rename_weights(
        directory,
        lambda key: (
            key.replace("vision_tower.", "vision_tower.vision_model.", 1)
            if key.startswith("vision_tower.") and not key.startswith("vision_tower.vision_model.")
            else key
        ),
    )


def _rename_weights(directory: Path, rename) -> Path:
    from safetensors.torch import load_file, save_file

    for path in directory.glob("*.safetensors"):
        tensors = load_file(path)
        save_file({rename(k): v for k, v in tensors.items()}, path, metadata={"format": "pt"})
    return directory


def build_qwen3_moe(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    """Qwen3-MoE: routed experts (8, top-2) in every layer; vLLM's fused-MoE path."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    _start(directory, seed)
    config = Qwen3MoeConfig(
        num_hidden_layers=layers,
        head_dim=32,
        moe_intermediate_size=64,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        **TEXT,
    )
    return _save(Qwen3MoeForCausalLM(config), directory)


#: DeepSeek-V3's Llama-4 attention scaling (Mistral Large 3 and Kimi checkpoints carry it):
#: queries at position p are scaled by 1 + beta * log(1 + floor(p / original)).  A short
#: `original` makes it act inside the test prompts.
LLAMA_4_SCALING = {"original_max_position_embeddings": 16, "beta": 0.5}


#: the DeepSeek decoder the MLA families share: multi-head latent attention, one dense
#: layer, then shared + routed experts
DEEPSEEK_TEXT = TEXT | {
    "num_key_value_heads": 4,
    # vLLM's reference CPU MLA kernel only exists for DeepSeek's latent size, 512 + 64
    "kv_lora_rank": 512,
    "q_lora_rank": 96,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 64,
    "v_head_dim": 32,
    "first_k_dense_replace": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "n_group": 1,  # vLLM's CPU router always groups; one group is plain top-k
    "topk_group": 1,
}


def build_deepseek_v2(
    directory: Path, layers: int = 4, seed: int = 0, llama_4_scaling: dict | None = None
) -> Path:
    """DeepSeek-V2: multi-head latent attention, one dense layer then shared + routed experts."""
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    _start(directory, seed)
    config = DeepseekV2Config(
        num_hidden_layers=layers,
        topk_method="greedy",
        norm_topk_prob=False,
        **DEEPSEEK_TEXT,
    )

    def scaling(data: dict) -> None:
        if llama_4_scaling is not None:
            data["llama_4_scaling"] = llama_4_scaling

    return _save(DeepseekV2ForCausalLM(config), directory, scaling)


def build_deepseek_v2_scaled(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    return build_deepseek_v2(directory, layers, seed, llama_4_scaling=LLAMA_4_SCALING)


def build_deepseek_v3(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    """DeepSeek-V3, Kimi-K2.5's decoder: MLA, sigmoid-routed experts with a correction bias."""
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    _start(directory, seed)
    # the released config's routing keys, which vLLM reads and transformers' config lacks
    released = {"topk_method": "noaux_tc", "scoring_func": "sigmoid"}
    config = DeepseekV3Config(num_hidden_layers=layers, **DEEPSEEK_TEXT, **released)
    return _save(DeepseekV3ForCausalLM(config), directory)


HARMONY_TOKENS = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>"]


def build_gpt_oss(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    """gpt-oss: attention sinks, sliding-window layers alternating with full ones, biased
    experts with a clamped SwiGLU, YaRN rotary embeddings."""
    from transformers import AutoTokenizer, GptOssConfig, GptOssForCausalLM

    _start(directory, seed)
    # the released tokenizer's harmony tokens: vLLM 0.17-0.19 build gpt-oss's reasoning
    # parser with the engine and look `<|end|>` up in the vocabulary
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.add_special_tokens({"additional_special_tokens": HARMONY_TOKENS})
    tokenizer.save_pretrained(directory)
    config = GptOssConfig(
        num_hidden_layers=layers,
        num_local_experts=4,
        num_experts_per_tok=2,
        head_dim=32,
        sliding_window=64,  # shorter than the longer prompts, so both kinds of layer matter
        layer_types=["sliding_attention", "full_attention"] * (layers // 2),
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 512,
            "rope_theta": 150000.0,
        },
        **(TEXT | {"vocab_size": len(tokenizer)}),
    )
    return _save(GptOssForCausalLM(config), directory)


def build_kimi_k25(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    """Kimi-K2.5's shape: a vision wrapper whose language model is a DeepSeek-V3 decoder
    (multi-head latent attention, sigmoid-routed experts), with a tiny MoonViT tower."""
    from transformers import (
        DeepseekV3Config,
        Kimi_K25Config,
        Kimi_K25ForConditionalGeneration,
        Kimi_K25VisionConfig,
    )

    _start(directory, seed)
    text = DeepseekV3Config(num_hidden_layers=layers, **DEEPSEEK_TEXT)
    vision = Kimi_K25VisionConfig(
        patch_size=14,
        num_attention_heads=2,
        num_hidden_layers=1,
        hidden_size=32,
        intermediate_size=64,
    )
    config = Kimi_K25Config(
        text_config=text,
        vision_config=vision,
        projection_hidden_size=32,
        image_token_id=IMAGE_TOKEN,
        tie_word_embeddings=False,
    )

    def text_architecture(data: dict) -> None:
        data["text_config"]["architectures"] = ["DeepseekV3ForCausalLM"]
        data["text_config"]["torch_dtype"] = "float32"

    # vLLM builds a wrapper's processing info before any model code runs (the native
    # reference's LLM does), so the directory carries transformers' processor too
    from transformers import (
        AutoTokenizer,
        Kimi_K25ImageProcessor,
        Kimi_K25Processor,
        Kimi_K25VideoProcessor,
    )

    Kimi_K25Processor(
        image_processor=Kimi_K25ImageProcessor(),
        video_processor=Kimi_K25VideoProcessor(),
        tokenizer=AutoTokenizer.from_pretrained(directory),
    ).save_pretrained(directory)
    return _save(Kimi_K25ForConditionalGeneration(config), directory, text_architecture)


def build_qwen3_vl(directory: Path, layers: int = 4, seed: int = 0) -> Path:
    """A tiny Qwen3-VL: interleaved M-RoPE text stack, a 2-block vision tower whose
    deepstack features feed the first text layers (image prompts only), and its processor
    (vLLM builds the processing info before any model code runs)."""
    from transformers import (
        AutoTokenizer,
        Qwen2VLImageProcessor,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    _start(directory, seed)
    rope = {"rope_type": "default", "mrope_section": [4, 6, 6], "mrope_interleaved": True}
    config = Qwen3VLConfig(
        text_config=dict(TEXT, num_hidden_layers=layers, head_dim=32, rope_scaling=rope),
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": TEXT["hidden_size"],
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "deepstack_visual_indexes": [0, 1],
            "num_position_embeddings": 64,
        },
        image_token_id=IMAGE_TOKEN,
        video_token_id=IMAGE_TOKEN,
        vision_start_token_id=1,
        vision_end_token_id=2,
        tie_word_embeddings=False,
    )
    sizes = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2}
    Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(**sizes),
        video_processor=Qwen3VLVideoProcessor(**sizes),
        tokenizer=AutoTokenizer.from_pretrained(directory),
    ).save_pretrained(directory)

    def text_dtype(data: dict) -> None:
        data["text_config"]["torch_dtype"] = "float32"

    return _save(Qwen3VLForConditionalGeneration(config), directory, text_dtype)


BUILDERS = {
    "llama": build_llama,
    "qwen3": build_qwen3,
    "qwen3_moe": build_qwen3_moe,
    "deepseek_v2": build_deepseek_v2,
    "deepseek_v2_llama4_scaling": build_deepseek_v2_scaled,
    "deepseek_v3": build_deepseek_v3,
    "llava": build_llava,
    "qwen3_vl": build_qwen3_vl,
    "kimi_k25": build_kimi_k25,
    "gpt_oss": build_gpt_oss,
}


#: ChatML, for speculators' `load_and_preprocess_dataset` (it refuses a tokenizer without a
#: chat template and finds the assistant turns through it).  No `{% generation %}` block, so
#: both lines take the same path: the assistant pattern detected from the template.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def add_chat_template(directory: Path) -> Path:
    """The tiny tokenizer in `directory` with CHAT_TEMPLATE (the model is untouched)."""
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2))
    return directory


def chat_samples(count: int, seed: int = 5) -> list[dict]:
    """Rows of a chat dataset as speculators reads one ({"conversations": [{"role",
    "content"}, ...]}): one or two turns each, of words the tiny tokenizer knows."""
    import random

    words = ["the", "data", "model", "layer", "token", "state", "value", "return", "import"]
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(low, high)))

    rows = []
    for i in range(count):
        turns = [("user", (3, 30)), ("assistant", (3, 60))] * (2 if i % 3 == 0 else 1)
        rows.append({"conversations": [{"role": r, "content": text(*n)} for r, n in turns]})
    return rows


def random_prompts(count: int, low: int, high: int, seed: int = 1) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(3, VOCAB) for _ in range(rng.randint(low, high))] for _ in range(count)]
