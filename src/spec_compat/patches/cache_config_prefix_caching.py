"""Turn prefix caching off in the stock ``CacheConfig``.

Target: ``vllm_hidden_states_generator.CacheConfig`` (speculators 0.3.0).
Why: from vLLM 0.12 ``enable_prefix_caching`` defaults to True; the stock requests carry no
    ``block_hasher``, so ``BlockPool.cache_full_blocks`` asserts once a prompt fills a block.
    Worse, a cache hit skips the forward pass over a shared prefix, so the capture would
    silently lack those rows.
How: the stock module's ``CacheConfig`` passes ``enable_prefix_caching=False`` unless the
    caller sets it (speculators 0.4.x already does).
Upstream change: vLLM 0.12.0, ``config/cache.py``: ``enable_prefix_caching: bool = True``.
Remove when: the stock extractor disables prefix caching itself.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.patches._stock import config_field, with_kwargs

FIELD = "enable_prefix_caching"


def probe(module: ModuleType) -> Verdict:
    from vllm.config import CacheConfig

    verdict, param = config_field(module, "CacheConfig", CacheConfig, FIELD)
    if verdict is not None:
        return verdict
    need = Need.NEEDED if param.default else Need.NOT_NEEDED
    return Verdict(need, signature_text(CacheConfig), f"{FIELD} defaults to {param.default!r}")


def wrap(original: Any) -> Any:
    return with_kwargs(original, lambda kw: kw.setdefault(FIELD, False))


PATCH = declare(
    __name__,
    target="CacheConfig",
    summary="disable prefix caching (no block hasher; cached prefixes skip the capture)",
)
