"""Return speculators 0.4.x results in the order of the input prompts.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (0.4.x).
Why: 0.4.x builds its results in ``sorted()`` order of request ids, which sorts
    ``req_0_10`` before ``req_0_2``: from 11 prompts on, ``results[i]`` is not prompt ``i``.
    Each result is self-consistent, so callers that zip results with other per-prompt data
    (loss masks, sample ids) are silently misaligned.
How: ``generate`` is wrapped: the request-id order the stock code used is recomputed from
    its counter, the results are put back in input order, and each result's ``input_ids`` is
    checked against its prompt; a mismatch raises instead of returning.
Upstream change: none; a speculators 0.4.0/0.4.0.1 bug.
Remove when: speculators 0.4.x is no longer used.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.stock_source import stock_calls
from spec_compat.patches._stock import prompt_lists


class ResultOrderError(RuntimeError):
    """A result could not be matched to its prompt."""


def probe(module: ModuleType) -> Verdict:
    sorts = stock_calls(module, "sorted")
    if any(c.n_positional for c in sorts):
        lines = ", ".join(str(c.line) for c in sorts)
        return Verdict(Need.NEEDED, f"sorted(...) at line {lines}", "results in id-string order")
    return Verdict(Need.NOT_NEEDED, "no sorted() in the stock driver")


def wrap(original: Any) -> Any:
    def generate(self: Any, token_ids: Any, *args: Any, **kwargs: Any) -> list[dict]:
        counter = self._request_counter
        results = original(self, token_ids, *args, **kwargs)
        ids = [f"req_{counter}_{i}" for i in range(len(results))]
        stock_order = sorted(range(len(results)), key=ids.__getitem__)
        ordered: list[Any] = [None] * len(results)
        for position, index in enumerate(stock_order):
            ordered[index] = results[position]
        max_len = self.vllm_config.model_config.max_model_len - 1
        for index, (prompt, result) in enumerate(
            zip(prompt_lists(token_ids), ordered, strict=True)
        ):
            got, want = result["input_ids"].tolist(), prompt[:max_len]
            if got != want and got != [int(t) for t in want]:  # (want: list, maybe not of int)
                raise ResultOrderError(
                    f"result for prompt {index} of this generate() call holds another prompt's ids"
                )
        return ordered

    return generate


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.generate",
    summary="speculators 0.4.x: results in input order (>=11 prompts came back reordered)",
    speculators=">=0.4,<0.5",
)
