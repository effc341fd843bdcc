"""What every patch shares: the stock modules' names and small adapter builders."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

GENERATOR = "speculators.data_generation.vllm_hidden_states_generator"
WORKER = "speculators.data_generation.custom_worker"


def with_kwargs(original: Any, adjust: Callable[[dict[str, Any]], None]) -> Callable[..., Any]:
    """A stand-in for `original` (a class or function) that edits keyword arguments first.

    The stock module only ever *calls* these names, so a function is a faithful stand-in;
    `__wrapped__` keeps the original reachable for doctor and revert checks.
    """

    @functools.wraps(original, updated=())
    def adapter(*args: Any, **kwargs: Any) -> Any:
        adjust(kwargs)
        return original(*args, **kwargs)

    return adapter


def parameters(obj: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(obj).parameters)


def named_adapter(adapter: type, original: type, patch: str) -> type:
    """Name an adapter subclass after the patch that made it (tracebacks, doctor, stacking)."""
    adapter.__qualname__ = f"spec_compat[{patch}]({original.__qualname__})"
    return adapter


def prompt_lists(token_ids: Any) -> list[list[int]]:
    """`generate()`'s prompts (a tensor, or a list of lists or tensors) as lists of ints."""
    if hasattr(token_ids, "tolist"):
        return token_ids.tolist()
    return [t.tolist() if hasattr(t, "tolist") else list(t) for t in token_ids]
