"""Let speculators 0.4.x take more prompts in one ``generate()`` than ``max_num_seqs``.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (0.4.x).
Why: the 0.4.x loop finishes requests only after the whole batch is prefilled.  With more
    than ``max_num_seqs`` (32) prompts, the first 32 stay running after their prefill, the
    rest can never be scheduled, and ``generate`` raises "Request req_0_32 not found in
    captured states".
How: ``generate`` is wrapped to call the stock method on consecutive slices of at most
    ``scheduler_config.max_num_seqs`` prompts and concatenate the results, in order.
Upstream change: none; a speculators 0.4.0/0.4.0.1 bug.
Remove when: speculators 0.4.x is no longer used.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ..gates import Need, Verdict
from ..names import GENERATOR
from ..patch import Patch
from ..stock_source import stock_mentions


def probe(module: ModuleType) -> Verdict:
    if stock_mentions(module, "all_prefill_complete"):
        return Verdict(Need.NEEDED, "requests finished after the whole batch", "max 32 a call")
    return Verdict(Need.NOT_NEEDED, "the stock loop finishes requests step by step")


def wrap(original: Any) -> Any:
    def generate(self: Any, token_ids: Any, *args: Any, **kwargs: Any) -> list[dict]:
        size = self.vllm_config.scheduler_config.max_num_seqs
        if len(token_ids) <= size:
            return original(self, token_ids, *args, **kwargs)
        results: list[dict] = []
        for start in range(0, len(token_ids), size):
            results.extend(original(self, token_ids[start : start + size], *args, **kwargs))
        return results

    return generate


PATCH = Patch(
    name="v04_batches_of_max_num_seqs",
    side="driver",
    module=GENERATOR,
    target="VllmHiddenStatesGenerator.generate",
    summary="speculators 0.4.x: split calls into max_num_seqs prompts (>32 failed)",
    probe=probe,
    wrap=wrap,
    speculators=">=0.4,<0.5",
)
