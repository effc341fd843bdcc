"""Count the layers of the decoder's config, wherever the model's config nests it.

Target: ``vllm_hidden_states_generator.AutoConfig`` (speculators 0.3.0 and 0.4.x).
Why: the stock ``__init__`` reads ``num_hidden_layers`` off the top-level config or its
    ``text_config`` and raises "Cannot determine num_layers from config" otherwise, before
    the load; an omni model nests its decoder one level deeper (Qwen2.5-Omni and Qwen3-Omni:
    ``thinker_config.text_config``), though vLLM serves it and captures that decoder's layers.
How: a proxy of ``AutoConfig``, bound only in the stock module, whose ``from_pretrained``
    returns ``get_text_config(decoder=True)`` of what it loaded: transformers' own answer to
    which config is the decoder's, the config itself for a plain language model.  The stock
    code reads nothing else of it (the probe checks), so its layer count, bounds check and
    default layer ids are the decoder's, the layers vLLM's EAGLE-3 capture indexes.
Upstream change: none in vLLM: a limitation of the old extractor.
Remove when: the stock extractor counts layers with ``get_text_config()``.
"""

from __future__ import annotations

import ast
import functools
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import dotted_name, stock_calls, tree

CALL = "AutoConfig.from_pretrained"
#: what the stock code reads of the loaded config: the layer count, at the top or one down
READS = {"config.num_hidden_layers", "config.text_config.num_hidden_layers"}


@functools.cache
def decoder_proxy() -> type:
    """The proxy class, made once it is needed (wrapt loads with the patch, not apply())."""
    import wrapt

    class DecoderAutoConfig(wrapt.ObjectProxy):
        def from_pretrained(self, *args: Any, **kwargs: Any) -> Any:
            config = self.__wrapped__.from_pretrained(*args, **kwargs)
            return config.get_text_config(decoder=True)

    return DecoderAutoConfig


def wrap(original: Any) -> Any:
    return decoder_proxy()(original)


def _config_reads(module: ModuleType) -> set[str]:
    """The dotted names read off `config` in the stock module (hasattr's names included)."""
    reads = set()
    for node in ast.walk(tree(module.__name__)):
        if isinstance(node, ast.Attribute) and (name := dotted_name(node)):
            if name.startswith("config.") and isinstance(node.value, ast.Name):
                reads.add(name)
        elif isinstance(node, ast.Call) and dotted_name(node.func) == "hasattr":
            owner, attribute = [*node.args, None, None][:2]
            named = isinstance(owner, ast.Name) and owner.id == "config"
            if named and isinstance(attribute, ast.Constant):
                reads.add(f"config.{attribute.value}")
    return reads


def probe(module: ModuleType) -> Verdict:
    calls = stock_calls(module, CALL)
    if not calls:
        return Verdict(Need.UNKNOWN, "no AutoConfig.from_pretrained call", "stock code moved")
    reads = _config_reads(module)
    found = f"line {calls[0].line}: {CALL}; reads {', '.join(sorted(reads)) or 'nothing'}"
    if "config.text_config" in reads and reads <= READS | {"config.text_config"}:
        return Verdict(Need.NEEDED, found, "layers counted at the top level or text_config only")
    return Verdict(Need.UNKNOWN, found, "the stock code reads the config otherwise")


PATCH = declare(
    __name__,
    target="AutoConfig",
    summary="count the decoder's layers where the config nests it (omni models' thinker)",
)
