"""A shrunken random copy of a model's architecture, built from its `config.json` alone.

The copy keeps what decides whether an extraction works — the architecture class, the
head size, the head ratio, the expert count and top-k, MLA ranks, rope scaling, sliding
windows, tied embeddings, the vocabulary, a layer of every kind the model has — and shrinks
only what costs time: depth (to `LAYERS`), the residual width and the feed-forward widths,
and the head counts (to a few heads of the same size, still divisible by the tensor
parallel size).  Sizes are set through transformers' own config class (its `attribute_map`
covers `n_embd`-style names and `get_text_config()` finds a wrapper's decoder), so no
family is special-cased.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYERS = 4
WIDTH = 128
FFN = 256
EXPERT_FFN = 64
TOKENIZER_VOCAB = 1024
#: a vision / audio tower: a few heads of the size it had, a narrow feed-forward; its depth
#: and index lists (deepstack layers, feature layers) stay, since they refer to the depth
TOWER_HEADS = 2
TOWER_FFN = 64
TOWER_HEAD_KEYS = ("num_attention_heads", "num_heads", "encoder_attention_heads")
TOWER_WIDTH_KEYS = ("hidden_size", "embed_dim", "d_model", "width")
TOWER_FFN_KEYS = ("intermediate_size", "encoder_ffn_dim", "ffn_dim", "mlp_dim")
#: a tower's output feeds the decoder: it must have the decoder's width
TOWER_OUT_KEYS = ("out_hidden_size", "projector_hidden_size", "text_hidden_size")
#: a tower that merges k x k patches (its merge size) outputs their concatenation: the width
#: times k**2 (Muse Glimmer's vision output_dim, which vLLM checks against the width)
TOWER_MERGE_KEYS = ("merge_kernel_size", "merge_size")
TOWER_MERGED_KEYS = ("output_dim",)
#: what a shrunken copy can only get wrong: quantised random weights mean nothing
DROPPED = ("quantization_config", "compression_config")
TOKENIZER_FILES = ("tokenizer*", "*.tiktoken", "special_tokens_map.json", "vocab.*", "merges.txt")
#: a multimodal wrapper's processor: vLLM builds it (and profiles the towers) at start-up
PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)


@dataclass
class Miniature:
    directory: Path
    architecture: str
    layers: int  # the real model's decoder layers
    mla: bool  # multi-head latent attention (DeepSeek-style)
    routed_experts: bool  # a router picks experts per token
    prompt_vocab: int  # prompts draw token ids below this
    multimodal: bool = False  # a wrapper: towers beside the decoder
    processor: bool = False  # the source's processor files were copied
    notes: list[str] = field(default_factory=list)

    def map_layers(self, layer_ids: list[int] | None) -> list[int] | None:
        """The real model's layer ids, placed at the same relative depth in the copy (the
        last layer stays the last: it is the one read before the final norm)."""
        if layer_ids is None:
            return None
        last = min(self.layers, LAYERS) - 1
        return [round(k * last / max(self.layers - 1, 1)) for k in layer_ids]


def routes_experts(text_config: Any) -> bool:
    """More than one expert to choose from (`num_experts`, `num_local_experts`,
    `n_routed_experts`, ... however the family names the count)."""
    return any(
        "expert" in key and "size" not in key and type(value) is int and value > 1
        for key, value in text_config.to_dict().items()
    )


def build_tokenizer(directory: Path) -> None:
    """A byte-level BPE trained in seconds on Python's own standard-library sources."""
    import sysconfig

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))[:60]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=["<unk>", "<s>", "</s>", "<image>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=["<image>"],
    )
    fast.save_pretrained(directory)


def shrink(raw: dict[str, Any], tensor_parallel_size: int = 1) -> tuple[Any, list[str]]:
    """transformers' config object for `raw`, shrunk as the module docstring says."""
    from transformers import AutoConfig

    raw = dict(raw)
    text_raw = raw.get("text_config") or raw
    notes = [f"dropped {key}: random weights are not quantised" for key in DROPPED if key in raw]
    for key in (*DROPPED, "auto_map", "_name_or_path", "transformers_version"):
        raw.pop(key, None)
    config = AutoConfig.for_model(**raw)
    text = config.get_text_config()
    # transformers 5's per-layer overrides (Gemma 4's full-attention head size): the global
    # values are what the shrink reads and sets; the overrides follow their layers below
    overrides = {int(k): v for k, v in (text.to_dict().get("per_layer_config") or {}).items()}
    if overrides:
        text.allow_global_per_layer_attribute_access = True
    depth = text.num_hidden_layers
    layers = min(depth, LAYERS)
    lists = {  # per-layer lists follow the depth ("M-M*-" patterns too)
        key: value
        for key, value in vars(text).items()
        if (isinstance(value, list) or (isinstance(value, str) and "pattern" in key))
        and len(value) == depth
    }
    kept = kept_layers([*lists.values(), [overrides.get(i) for i in range(depth)]], layers)
    for key, value in lists.items():
        picked = [value[i] for i in kept]
        setattr(text, key, "".join(picked) if isinstance(value, str) else picked)
    if overrides:
        text.per_layer_config = None
    text.num_hidden_layers = layers
    if overrides:
        text.per_layer_config = {n: overrides[i] for n, i in enumerate(kept) if i in overrides}

    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    small_kv = min(kv_heads, max(2, tensor_parallel_size))
    group = heads // kv_heads if heads % kv_heads == 0 else 1
    small_heads = small_kv * min(group, 4)
    text.num_attention_heads = small_heads
    if hasattr(text, "num_key_value_heads"):
        text.num_key_value_heads = small_kv
    # an explicit head_dim is read where the config carries one (or its class defines one);
    # elsewhere the head size is derived from the width, which must then keep it
    knows_head_dim = "head_dim" in text_raw or "head_dim" in type(text)().to_dict()
    if knows_head_dim:
        text.head_dim = head_dim
    text.hidden_size = WIDTH if knows_head_dim else small_heads * head_dim
    for key, size in (
        ("intermediate_size", FFN),
        ("moe_intermediate_size", EXPERT_FFN),
        ("shared_expert_intermediate_size", EXPERT_FFN),
    ):
        if getattr(text, key, None):
            setattr(text, key, size)
    vars(text).pop("allow_global_per_layer_attribute_access", None)
    notes.append(
        f"{depth} -> {layers} layers ({kept}), hidden {text.hidden_size}, {heads}/{kv_heads} -> "
        f"{small_heads}/{small_kv} heads of size {head_dim}; experts, vocabulary and every "
        "other setting as configured"
    )
    return config, notes + shrink_towers(config)


def kept_layers(per_layer: list[list[Any]], layers: int) -> list[int]:
    """Which `layers` of the model's layers the copy keeps: the first layer of every kind
    (its values in the per-layer lists taken together: attention or state, sliding or full,
    its own head size), then the earliest others, in the model's order."""
    depth = len(per_layer[0])
    firsts: dict[str, int] = {}
    for i in range(depth):
        firsts.setdefault(repr([values[i] for values in per_layer]), i)
    chosen = list(firsts.values())[:layers]
    others = [i for i in range(depth) if i not in chosen]
    return sorted(chosen + others[: layers - len(chosen)])


def shrink_towers(config: Any) -> list[str]:
    """Shrink every part of a composite config that is not the decoder (vision, audio
    towers, however deep they nest: `sub_configs` names them) in place, as TOWER_* say."""
    text = config.get_text_config()
    notes = []
    for name, part in _parts(config):
        if part is text:
            continue
        head_key = next((k for k in TOWER_HEAD_KEYS if _int(part, k)), None)
        width_key = next((k for k in TOWER_WIDTH_KEYS if _int(part, k)), None)
        if head_key and width_key:
            head = getattr(part, width_key) // getattr(part, head_key)
            setattr(part, head_key, TOWER_HEADS)
            setattr(part, width_key, TOWER_HEADS * head)
            if _int(part, "num_key_value_heads"):
                part.num_key_value_heads = TOWER_HEADS
            merge_key = next((k for k in TOWER_MERGE_KEYS if _int(part, k)), None)
            for key in TOWER_MERGED_KEYS if merge_key else ():
                if _int(part, key):
                    setattr(part, key, TOWER_HEADS * head * getattr(part, merge_key) ** 2)
        for key in TOWER_FFN_KEYS:
            if _int(part, key):
                setattr(part, key, TOWER_FFN)
        for key in TOWER_OUT_KEYS:
            if _int(part, key):
                setattr(part, key, text.hidden_size)
        notes.append(f"{name}: {TOWER_HEADS} heads, feed-forward {TOWER_FFN}, depth as configured")
    return notes


def _parts(config: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every sub-config of `config`, depth first, with its dotted name."""
    found = []
    for name in getattr(config, "sub_configs", None) or {}:  # a property in transformers 4
        part = getattr(config, name, None)
        if part is not None and hasattr(part, "to_dict"):
            found.append((prefix + name, part))
            found.extend(_parts(part, f"{prefix}{name}."))
    return found


def _int(part: Any, key: str) -> bool:
    return type(getattr(part, key, None)) is int and getattr(part, key) > 0


def source_depth(raw: dict[str, Any]) -> int:
    """The real model's decoder layers, as transformers' config class counts them (some
    families derive the count from a per-layer list instead of storing it)."""
    from transformers import AutoConfig

    raw = {k: v for k, v in raw.items() if k not in (*DROPPED, "auto_map", "_name_or_path")}
    return AutoConfig.for_model(**raw).get_text_config().num_hidden_layers


def build(source: Path, directory: Path, tensor_parallel_size: int = 1, seed: int = 0) -> Miniature:
    """The shrunken random float32 copy of the model at `source` (only its config.json and
    tokenizer files are read), saved in `directory`."""
    import torch
    import transformers

    raw = json.loads((source / "config.json").read_text())
    architecture = (raw.get("architectures") or ["?"])[0]
    depth = source_depth(raw)
    config, notes = shrink(raw, tensor_parallel_size)
    cls = getattr(transformers, architecture, None)
    if cls is None:
        raise LookupError(
            f"transformers {transformers.__version__} has no class {architecture}, so no "
            "random copy can be built here (the architecture needs remote code or a newer "
            "transformers)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config.architectures = [architecture]
    cls(config).to(torch.float32).save_pretrained(directory, safe_serialization=True)
    config_file = directory / "config.json"
    saved = json.loads(config_file.read_text())
    saved["torch_dtype"] = "float32"
    config_file.write_text(json.dumps(saved, indent=2))

    copied = [f for p in TOKENIZER_FILES for f in source.glob(p) if f.is_file()]
    processor = [f for p in PROCESSOR_FILES for f in source.glob(p) if f.is_file()]
    for file in copied + processor:
        shutil.copy2(file, directory / file.name)
    if not copied:
        build_tokenizer(directory)
        notes.append(f"no tokenizer files: a {TOKENIZER_VOCAB}-token stand-in tokenizer")
    vocab = config.get_text_config().vocab_size
    return Miniature(
        directory=directory,
        architecture=architecture,
        layers=depth,
        mla=bool(getattr(config.get_text_config(), "kv_lora_rank", None)),
        routed_experts=routes_experts(config.get_text_config()),
        prompt_vocab=min(vocab, TOKENIZER_VOCAB),
        notes=notes,
        multimodal=config.get_text_config() is not config,
        processor=bool(processor),
    )
