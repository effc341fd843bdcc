"""A call interrupted at many points, each chosen by count, not wall time: the
same generator's next call equals an uninterrupted one bitwise (interrupt_points.py).

Each test is one extractor process serving one 33-prompt call (two steps) again and again:
~75 s a line on 2 cores.
"""

from __future__ import annotations

import pytest

from . import battery
from .conftest import LAYERS, LINES
from .harness import TOLERANCE, compare, run_stock

pytestmark = pytest.mark.e2e

#: vLLM's driver-side code a Ctrl-C can land in, besides the stock module and spec_compat:
#: the scheduler and KV-cache manager, requests, the executor.  Not the reply queue
#: (shm_broadcast): its wait loop runs as many lines as the workers take time, so counting
#: there would make the points depend on the machine's speed.  A Ctrl-C in that wait is the
#: battery's "interrupted in a reply wait" (test_silent_corruption.py).
DRIVER_CODE = ["vllm.v1.core", "vllm.v1.request", "vllm.v1.executor"]


def interrupted_calls(speculators_dir, model, points: int, **options) -> dict:
    run = run_stock(
        speculators_dir,
        model,
        battery.ordered_prompts(),
        LAYERS,
        max_model_len=battery.MAX_MODEL_LEN,
        exclude=options.pop("exclude", None),
        env=options.pop("env", None),
        extra={"interrupt_points": points} | options,
        timeout=1200,
    )
    assert run.data is not None, run.tail
    assert run.data["repeat"] == "exact", "an uninterrupted call did not repeat itself"
    return run.data


def table(points: list[dict]) -> str:
    rows = (f"{p['at']:>6} {p['where']}: {p['interrupted']} -> {p['after']}" for p in points)
    return "\n".join(rows)


@pytest.mark.fault
@pytest.mark.exhaustive
def test_ctrl_c_at_40_points_of_a_call_leaves_the_generator_exact(
    speculators_dir, tiny_llama, llama_oracle
):
    """A real SIGINT at 40 line events spread over the driver's whole call (the stock loop,
    spec_compat, vLLM's scheduler and executor): each interrupted call raises
    KeyboardInterrupt (in an RPC, once the workers' reply is in), and the next call is
    exact."""
    found = interrupted_calls(speculators_dir, tiny_llama, 40, traced=DRIVER_CODE)
    prompts = battery.ordered_prompts()
    assert compare(found["reference"], prompts, llama_oracle(prompts)) <= TOLERANCE
    points = found["points"]
    assert all(p["where"] for p in points), f"points past the call's end:\n{table(points)}"
    files = {p["where"].split(":")[0] for p in points}
    assert "scheduler.py" in files, files  # the points reach into vLLM
    broken = [
        p
        for p in points
        if p["after"] != "exact" or "KeyboardInterrupt" not in str(p["interrupted"])
    ]
    assert not broken, table(broken)


@pytest.mark.fault
@pytest.mark.exhaustive
def test_an_exception_at_120_points_of_the_scheduler_leaves_the_generator_exact(
    speculators_dir, tiny_llama
):
    """KeyboardInterrupt raised at the very line, as any exception raised there would be,
    at 120 line events of the scheduler's part of the call: the next call is exact, also
    where the scheduler's own state was left torn (scheduler_rebuild)."""
    found = interrupted_calls(
        speculators_dir, tiny_llama, 120, traced=["vllm.v1.core.sched"], raise_there=True
    )
    broken = [p for p in found["points"] if p["after"] != "exact"]
    assert not broken, table(broken)


@pytest.mark.fault
@pytest.mark.exhaustive
def test_without_scheduler_rebuild_an_exception_inside_the_scheduler_breaks_later_calls(
    line, speculators_dir, tiny_llama
):
    """The same 120 points without scheduler_rebuild: aborting the requests does not mend a
    scheduler torn mid-method (e.g. a request queued as waiting, not yet in `requests`),
    and every later call fails."""
    if line != LINES[-1]:
        pytest.skip(f"the scheduler is the same on both lines: {LINES[-1]} shows it")
    found = interrupted_calls(
        speculators_dir,
        tiny_llama,
        120,
        traced=["vllm.v1.core.sched"],
        raise_there=True,
        exclude=["scheduler_rebuild"],
    )
    broken = [p for p in found["points"] if p["after"] != "exact"]
    assert broken, "every call after an exception in the scheduler was exact without the patch"
    assert "KeyError" in broken[-1]["after"], table(broken)
