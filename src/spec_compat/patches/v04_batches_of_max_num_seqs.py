"""Let speculators 0.4.x take more prompts in one ``generate()`` than one pass can hold.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (0.4.x).
Why: the 0.4.x loop finishes requests only after the whole batch is prefilled, so every
    prompt of a call must be running at once.  With more than ``max_num_seqs`` (32)
    prompts, or more tokens than the KV cache holds (32 long prompts on a large model),
    the rest can never be scheduled and ``generate`` raises "Request req_0_32 not found in
    captured states" after the others were computed.
How: ``generate`` is wrapped to call the stock method on consecutive slices of the prompts
    and concatenate the results, in order.  A slice has at most
    ``scheduler_config.max_num_seqs`` prompts and at most the KV blocks the scheduler has
    free when the call starts, counted per prompt as vLLM allocates them: one block of each
    KV cache group's block size per ``block_size`` tokens of the (cut) prompt.  A prompt
    that alone needs more goes alone, and the stock call decides.
Upstream change: none; a speculators 0.4.0/0.4.0.1 bug.
Remove when: speculators 0.4.x is no longer used.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.engine.stock_source import stock_mentions


def probe(module: ModuleType) -> Verdict:
    from vllm.v1.core.block_pool import BlockPool

    free_blocks = getattr(BlockPool, "get_num_free_blocks", None)
    found = f"BlockPool.get_num_free_blocks: {signature_text(free_blocks)}"
    if not stock_mentions(module, "all_prefill_complete"):
        return Verdict(Need.NOT_NEEDED, found, "the stock loop finishes requests step by step")
    if free_blocks is None:
        return Verdict(Need.UNKNOWN, found, "cannot count the KV cache's free blocks")
    return Verdict(Need.NEEDED, found, "requests finish after the whole batch: one pass a call")


def slices(lengths: list[int], most: int, free_blocks: int, block_sizes: list[int]) -> list[range]:
    """Consecutive index ranges of at most `most` prompts and `free_blocks` KV blocks each."""
    cuts, start, used = [], 0, 0
    for i, length in enumerate(lengths):
        need = sum(-(-length // size) for size in block_sizes)
        if i > start and (i - start == most or used + need > free_blocks):
            cuts.append(range(start, i))
            start, used = i, 0
        used += need
    return [*cuts, range(start, len(lengths))]


def wrap(original: Any) -> Any:
    def generate(self: Any, token_ids: Any, *args: Any, **kwargs: Any) -> list[dict]:
        scheduler = self.scheduler
        longest = self.vllm_config.model_config.max_model_len - 1  # the stock loop cuts there
        parts = slices(
            [min(len(ids), longest) for ids in token_ids],
            self.vllm_config.scheduler_config.max_num_seqs,
            scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
            [group.kv_cache_spec.block_size for group in scheduler.kv_cache_config.kv_cache_groups],
        )
        if len(parts) == 1:
            return original(self, token_ids, *args, **kwargs)
        results: list[dict] = []
        for part in parts:
            results.extend(original(self, token_ids[part.start : part.stop], *args, **kwargs))
        return results

    return generate


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.generate",
    summary="speculators 0.4.x: split calls by max_num_seqs and free KV blocks (more failed)",
    speculators=">=0.4,<0.5",
    after=("v04_results_in_input_order",),  # each stock call's results are put in order
)
