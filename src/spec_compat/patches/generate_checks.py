"""Refuse bad prompts before work starts, and corrupt hidden states before they are returned.

Target: ``vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate`` (both lines).
Why: the stock ``generate`` hands prompts to vLLM's scheduler directly, past vLLM's own
    input validation (``[[1.5, 2.7]]`` came back as the states of ``[1, 2]``; a flat list
    failed with ``'int' object is not iterable``); an empty prompt or a token id outside
    the vocabulary fails deep in the engine (or, on GPU, reads out of bounds), after the
    batch's other work is done.
    Prompts longer than ``max_model_len - 1`` are cut silently.  And nothing looks at what
    comes back: NaN/Inf or all-zero hidden states (a broken checkpoint, an overflow in
    half precision, a capture that missed rows) go straight into training data.
How: ``generate`` is wrapped.  Before: no prompts, an empty prompt, an out-of-vocabulary
    id, or input that is not exactly integer ids in ``list[list[int]]`` / 2-D shape (a float
    id, a flat list, a 1-D tensor, a string, ``None``) raises ``ValueError`` naming the
    prompt and the expected shape; a prompt that will be cut is logged with
    its length.  After: every result must have one row per returned token, finite values,
    and no all-zero row, per layer; otherwise ``CorruptHiddenStates`` names the prompt and
    layer and carries the results (``.results``) so nothing is lost.  Two reductions per
    layer, no copy of the states; where the shared-memory transport's workers already ran
    the same test on the device as the rows were captured, and found nothing (the
    ``WorkerChecks`` that ``shm_transport_driver`` hands over), the driver skips the value
    pass (a failing count sends it through the full pass, which names the prompt and layer).
    Declared to wrap the ``v04_*`` patches of ``generate``: it checks the caller's prompts
    before they are split, and the results once they are whole and in input order.
Upstream change: none; the stock extractor never validated.
Remove when: speculators validates prompts and captured states itself.
"""

from __future__ import annotations

import numbers
from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.patches._handoff import WorkerChecks
from spec_compat.patches._row_checks import row_faults


class CorruptHiddenStates(RuntimeError):
    """Captured hidden states that must not reach training data; `.results` keeps them."""

    def __init__(self, problems: list[str], results: list[dict]):
        self.problems, self.results = problems, results
        shown = "\n".join(f"  - {p}" for p in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"corrupt hidden states in {len(problems)} place(s):\n{shown}{more}")


SHAPE = "pass list[list[int]] (one list of token ids per prompt) or a 2-D integer tensor"


def token_lists(token_ids: Any) -> list[list[int]]:
    """The prompts as lists of ints, or ValueError: nothing is converted that is not exactly
    an integer id (the stock code would truncate 1.5 to 1 without a word)."""
    if token_ids is None or isinstance(token_ids, (str, bytes)):
        what = "a string: tokenize it first" if token_ids is not None else "None"
        raise ValueError(f"generate() got {what}; {SHAPE}")
    if getattr(token_ids, "ndim", 2) != 2:
        raise ValueError(f"generate() got a {token_ids.ndim}-D tensor; {SHAPE}")
    prompts = []
    for i, prompt in enumerate(token_ids):
        where = f"prompt {i} of this generate() call"
        if isinstance(prompt, (str, bytes)):
            raise ValueError(f"{where} is a string: tokenize it first; {SHAPE}")
        if getattr(prompt, "ndim", 1) != 1 or not hasattr(prompt, "__iter__"):
            raise ValueError(
                f"{where} is {type(prompt).__name__} {prompt!r:.40}, not a list; {SHAPE}"
            )
        ids = prompt.tolist() if hasattr(prompt, "tolist") else list(prompt)
        if not set(map(type, ids)) <= {int}:  # plain ints (the usual case) need no pass
            bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, numbers.Integral)]
            if bad:
                raise ValueError(
                    f"{where}: token ids must be integers, got {bad[0]!r} "
                    f"({type(bad[0]).__name__}); {SHAPE}"
                )
            ids = [int(t) for t in ids]
        prompts.append(ids)
    return prompts


def check_prompts(prompts: list[list[int]], vocab_size: int, max_len: int) -> None:
    if not prompts:
        raise ValueError("generate() got no prompts")
    for i, ids in enumerate(prompts):
        prompt = f"prompt {i} of this generate() call"
        if not ids:
            raise ValueError(f"{prompt} is empty: there is no token to capture states for")
        low, high = min(ids), max(ids)
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{prompt}: token id {bad} is outside the vocabulary (0..{vocab_size - 1})"
            )
        if len(ids) > max_len:
            import logging  # only for a prompt that will be cut

            logging.getLogger("spec_compat").warning(
                "%s has %d tokens; the stock extractor keeps the first %d (max_model_len - 1)",
                prompt,
                len(ids),
                max_len,
            )


def problems_in(results: list[dict], layer_ids: list[int], values: bool = True) -> list[str]:
    """Row counts and layer counts always; values (NaN/Inf, all-zero rows) unless the
    workers already tested every returned row (`values=False`)."""
    import torch

    found = []
    for i, result in enumerate(results):
        n_tokens = len(result["input_ids"])
        for layer, states in zip(layer_ids, result["hidden_states"], strict=False):
            where = f"prompt {i} of this generate() call, layer {layer}"
            if states.shape[0] != n_tokens:
                found.append(f"{where}: {states.shape[0]} rows for {n_tokens} tokens")
                continue
            if not values:
                continue
            nonfinite, zero = row_faults(states)
            if bool(nonfinite.any()):
                found.append(f"{where}: NaN/Inf in {int((~torch.isfinite(states)).sum())} values")
            elif bool(zero.any()):
                zero_rows = zero.nonzero().flatten().tolist()
                found.append(f"{where}: all-zero state at token(s) {zero_rows[:8]}")
        if len(result["hidden_states"]) != len(layer_ids):
            found.append(
                f"prompt {i} of this generate() call: {len(result['hidden_states'])} layers "
                f"for {len(layer_ids)} requested"
            )
    return found


def probe(module: ModuleType) -> Verdict:
    generate = module.VllmHiddenStatesGenerator.generate
    return Verdict(Need.NEEDED, signature_text(generate), "the stock generate checks nothing")


def wrap(original: Any) -> Any:
    def generate(self: Any, token_ids: Any, *args: Any, **kwargs: Any) -> list[dict]:
        model_config = self.vllm_config.model_config
        check_prompts(
            token_lists(token_ids), model_config.get_vocab_size(), model_config.max_model_len - 1
        )
        WorkerChecks.restart(self.executor)
        results = original(self, token_ids, *args, **kwargs)
        values = not WorkerChecks.clean(self.executor)
        if problems := problems_in(results, list(self.layer_ids), values=values):
            raise CorruptHiddenStates(problems, results)
        return results

    return generate


PATCH = declare(
    __name__,
    target="VllmHiddenStatesGenerator.generate",
    summary="driver: refuse empty/out-of-vocabulary prompts; refuse NaN/Inf/all-zero states",
    after=("v04_results_in_input_order", "v04_batches_of_max_num_seqs"),
)
