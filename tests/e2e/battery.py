"""One extractor process per (vLLM release, speculators line) for every check that needs
neither its own engine settings nor its own patch selection.

Starting the stock extractor takes about a minute on a 2-core machine (torch and vLLM are
imported in the driver, then again in the spawned worker); a `generate()` of a few hundred
prompts on the tiny model takes well under a second.  So the patched extractor is
started once and serves a battery of named calls (the oracle batch in both orders, 11, 12
and 33 prompts, steps over the chunked-prefill budget, batches of 1/8/64, shared prefixes,
prompts at and past the length limit, bad input, and a call after the refusals); each
test reads its calls by name and asserts on them alone.

Calls that must fail (bad input) come last but one: a refusal must leave the generator
serving the next call, which `after refusals` checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import tiny_models
from .harness import Run, run_stock

#: Long enough for prompts of 500-1,000 tokens; steps still run over the 8,192-token
#: budget that triggers chunked prefill (speculators 0.3.0 uses max(8192, max_model_len)).
MAX_MODEL_LEN = 1024
#: what the stock code keeps of a longer prompt: max_model_len - 1 tokens
KEPT_TOKENS = MAX_MODEL_LEN - 1


def short_prompts() -> list[list[int]]:
    """The oracle batch: 14 prompts of 2-200 tokens."""
    return tiny_models.random_prompts(14, 2, 200)


def ordered_prompts() -> list[list[int]]:
    """33 prompts, ~5,000 tokens: 11+ shows speculators 0.4.x's request-id order; a call of
    all needs two steps at the stock settings (32 prompts a step) and at vLLM's CPU default
    (4,096 tokens a step, engine_batch_defaults)."""
    return tiny_models.random_prompts(33, 2, 300, seed=3)


def many_prompts() -> list[list[int]]:
    """300 short prompts: more than one step holds at vLLM's CPU default (256 prompts) and
    at the stock 32, speculators 0.4.x's limit on one generate()."""
    return tiny_models.random_prompts(300, 2, 24, seed=41)


def long_prompts() -> list[list[int]]:
    """32 prompts of 500-1,000 tokens: ~24k tokens, so steps exceed the 8,192-token budget."""
    return tiny_models.random_prompts(32, 500, 1000, seed=7)


def mixed_prompts() -> list[list[int]]:
    """40 short prompts, 24 sharing a 300-token prefix, then one of exactly the kept length
    and one 189 tokens past it."""
    prefix = tiny_models.random_prompts(1, 300, 300, seed=21)[0]
    shared = [prefix + p for p in tiny_models.random_prompts(24, 1, 150, seed=6)]
    prompts = tiny_models.random_prompts(40, 2, 120, seed=5) + shared
    prompts += tiny_models.random_prompts(1, KEPT_TOKENS, KEPT_TOKENS, seed=8)
    prompts += tiny_models.random_prompts(1, KEPT_TOKENS + 189, KEPT_TOKENS + 189, seed=9)
    return prompts


OUT_OF_VOCABULARY = tiny_models.VOCAB + 7


@dataclass
class Battery:
    """Named calls on one patched extractor; `results(name)` raises with the call's error."""

    run: Run
    calls: dict[str, list[list[int]]]
    outputs: dict[str, Any] = field(default_factory=dict)

    def results(self, name: str) -> list[dict[str, Any]]:
        output = self.outputs.get(name)
        assert output is not None, f"the battery did not run:\n{self.run.tail}"
        assert not isinstance(output, dict), f"call {name!r} failed: {output['error']}"
        return output

    def error(self, name: str) -> str:
        output = self.outputs.get(name)
        assert isinstance(output, dict), f"call {name!r} was not refused: {output!r:.200}"
        return output["error"]


def planned_calls() -> dict[str, list[list[int]]]:
    short, ordered, mixed = short_prompts(), ordered_prompts(), mixed_prompts()
    return {
        "short": short,
        "short reversed": list(reversed(short)),
        "11 prompts": ordered[:11],
        "12 prompts": ordered[:12],
        "33 prompts": ordered,
        "300 prompts": many_prompts(),
        "long prompts": long_prompts(),
        "1 prompt": mixed[:1],
        # one-token prompts among longer ones: Model Runner V2 sorts queries of the decode
        # length (1 token) first
        "1-token prompts": [[5], short[1], [7], short[2], [11], [4]],
        "8 prompts": mixed[:8],
        "64 prompts": mixed[:64],
        "length limits": mixed[64:66],
        "no prompts": [],
        "an empty prompt": [short[0], []],
        "out of vocabulary": [[7, OUT_OF_VOCABULARY]],
        "fractional ids": [[5, 6.5, 7]],  # the stock code returned the states of [5, 6, 7]
        "a flat list": [5, 6, 7],
        "a string": ["hello"],
        "after refusals": short[:3],
        # a call interrupted in its second step (KeyboardInterrupt, caught), then one that
        # needs several steps again: the stock scheduler still held the first one's requests
        "interrupted": ordered,
        "after an interrupted call": ordered,
        # Ctrl-C between a step's execute_model and its sample_tokens: 0.3.0's next call
        # failed ("sample_tokens() must be called after execute_model() returns None")
        "interrupted before sampling": ordered,
        "after a sampling interrupt": ordered,
        # a real SIGINT while the driver waits for the workers' states: the stock executor
        # abandoned the reply, and every later RPC read the one before it
        "interrupted in a reply wait": ordered,
        "after a reply-wait interrupt": ordered,
        # last: a worker process SIGKILLed (the OOM killer) before the call
        "after a worker died": short[:3],
        "again after a worker died": short[:3],
    }


def run_battery(
    speculators_dir: Path, model: Path, layers: list[int], env: dict[str, str] | None = None
) -> Battery:
    calls = planned_calls()
    prompts: list[list[int]] = []
    indices: list[list[int]] = []
    for batch in calls.values():
        indices.append(list(range(len(prompts), len(prompts) + len(batch))))
        prompts.extend(batch)
    run = run_stock(
        speculators_dir,
        model,
        prompts,
        layers,
        calls=indices,
        max_model_len=MAX_MODEL_LEN,
        env=env,
        extra={
            "catch_errors": True,
            "interrupt_call": list(calls).index("interrupted"),
            "sample_interrupt_call": list(calls).index("interrupted before sampling"),
            "sigint_in_reply_call": list(calls).index("interrupted in a reply wait"),
            "kill_worker_call": list(calls).index("after a worker died"),
        },
    )
    battery = Battery(run, calls)
    if run.data is not None:
        battery.outputs = dict(zip(calls, run.data["results"], strict=True))
    return battery
