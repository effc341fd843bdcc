"""Small behaviour builders that several patches share (the registry stamps their results)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..gates import Need, Verdict, signature_text


def with_kwargs(original: Any, adjust: Callable[[dict[str, Any]], None]) -> Callable[..., Any]:
    """A stand-in for `original` (a class or function) that edits keyword arguments first.

    The stock module only ever *calls* these names, so a function is a faithful stand-in.
    """

    def adapter(*args: Any, **kwargs: Any) -> Any:
        adjust(kwargs)
        return original(*args, **kwargs)

    return adapter


def generator_init_probe(module: Any, names: set[str], reason: str) -> Verdict:
    """NEEDED while the stock generator's `__init__` takes `names`; any other shape is drift."""
    init = module.VllmHiddenStatesGenerator.__init__
    found = f"__init__{signature_text(init)}"
    if names <= set(inspect.signature(init).parameters):
        return Verdict(Need.NEEDED, found, reason)
    return Verdict(Need.UNKNOWN, found, "the stock __init__ changed")


def checked_init(original: Callable[..., None], check: Callable[[dict[str, Any]], None]) -> Any:
    """The stock `__init__`, run only after `check` accepted its arguments (defaults filled)."""
    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        check(bound.arguments)
        original(self, *args, **kwargs)

    return __init__


def parameters(obj: Any) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(obj).parameters)


def prompt_lists(token_ids: Any) -> list[list[int]]:
    """`generate()`'s prompts (a tensor, or a list of lists or tensors) as lists of ints."""
    if hasattr(token_ids, "tolist"):
        return token_ids.tolist()
    return [t.tolist() if hasattr(t, "tolist") else list(t) for t in token_ids]
