"""Finish each step with ``sample_tokens()`` after ``execute_model()`` returns ``None``.

Target: ``vllm_hidden_states_generator.MultiprocExecutor`` (speculators 0.3.0).
Why: from vLLM 0.11.1 a step has two phases: ``execute_model`` keeps its state and returns
    ``None``; the next ``execute_model`` raises "sample_tokens() must be called after
    execute_model() returns None" unless ``sample_tokens`` consumed it.  The 0.3.0 loop never
    calls it, so its second step fails.
How: the stock module's ``MultiprocExecutor`` is a subclass (visible to the stock code only)
    whose ``execute_model`` calls ``sample_tokens(None)`` (no structured output) when the
    first phase returns ``None``, as ``EngineCore.step`` does.
Upstream change: vLLM 0.11.1 ``v1/worker/gpu_model_runner.py`` and ``multiproc_executor.py``.
Remove when: the extractor calls ``sample_tokens`` itself (speculators 0.4.x does).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from spec_compat.engine.patch import declare
from spec_compat.engine.probes import Need, Verdict, signature_text
from spec_compat.engine.stock_source import stock_mentions


def _installed() -> Any:
    from vllm.v1.executor.multiproc_executor import MultiprocExecutor

    return MultiprocExecutor


def probe(module: ModuleType) -> Verdict:
    executor = _installed()
    if not hasattr(executor, "sample_tokens"):
        return Verdict(Need.NOT_NEEDED, signature_text(executor.execute_model), "one-phase step")
    found = signature_text(executor.sample_tokens)
    if stock_mentions(module, "self.executor.sample_tokens"):
        return Verdict(Need.NOT_NEEDED, found, "the stock loop calls sample_tokens")
    return Verdict(Need.NEEDED, found, "two-phase step; the stock loop never samples")


def wrap(original: type) -> type:
    class MultiprocExecutor(original):  # type: ignore[misc, valid-type]
        def execute_model(self, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            output = super().execute_model(scheduler_output, *args, **kwargs)
            return self.sample_tokens(None) if output is None else output

    return MultiprocExecutor


PATCH = declare(
    __name__,
    target="MultiprocExecutor",
    summary="call sample_tokens() after execute_model() (two-phase steps since 0.11.1)",
)
