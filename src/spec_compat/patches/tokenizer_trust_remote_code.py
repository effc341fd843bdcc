"""Load the tokenizer with ``trust_remote_code=True``, like the config and the model.

Target: ``vllm_hidden_states_generator.AutoTokenizer`` (speculators 0.3.0 and 0.4.x).
Why: the stock ``__init__`` calls ``AutoTokenizer.from_pretrained(model_path)`` bare while it
    loads the config and the vLLM model with ``trust_remote_code=True``; a checkpoint whose
    tokenizer class ships with it (Kimi-K2.5's tiktoken tokenizer, any ``auto_map``) fails.
How: a proxy of ``AutoTokenizer``, bound only in the stock module, whose ``from_pretrained``
    defaults ``trust_remote_code=True``; an explicit value wins.
Upstream change: none in vLLM: a speculators bug of the old extractor.
Remove when: the stock extractor passes ``trust_remote_code`` to the tokenizer.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import stock_calls

CALL = "AutoTokenizer.from_pretrained"


@functools.cache
def trusting_proxy() -> type:
    """The proxy class, made once it is needed (wrapt loads with the patch, not apply())."""
    import wrapt

    class TrustingAutoTokenizer(wrapt.ObjectProxy):
        def from_pretrained(self, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("trust_remote_code", True)
            return self.__wrapped__.from_pretrained(*args, **kwargs)

    return TrustingAutoTokenizer


def wrap(original: Any) -> Any:
    return trusting_proxy()(original)


def probe(module: ModuleType) -> Verdict:
    calls = stock_calls(module, CALL)
    if not calls:
        return Verdict(Need.UNKNOWN, "no AutoTokenizer.from_pretrained call", "stock code moved")
    bare = [c for c in calls if "trust_remote_code" not in c.keywords]
    found = ", ".join(f"line {c.line}: {CALL}({', '.join(sorted(c.keywords))})" for c in calls)
    if bare:
        return Verdict(Need.NEEDED, found, "tokenizer loaded without trust_remote_code")
    return Verdict(Need.NOT_NEEDED, found, "the stock call passes trust_remote_code")


PATCH = declare(
    __name__,
    target="AutoTokenizer",
    summary="load the tokenizer with trust_remote_code=True (custom tokenizer code)",
)
