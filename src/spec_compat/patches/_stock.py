"""Small behaviour builders that several patches share (the registry stamps their results)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spec_compat.engine.probes import Need, Verdict, signature, signature_text

if TYPE_CHECKING:
    import inspect


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
    if names <= set(signature(init).parameters):
        return Verdict(Need.NEEDED, found, reason)
    return Verdict(Need.UNKNOWN, found, "the stock __init__ changed")


def checked_init(original: Callable[..., None], check: Callable[[dict[str, Any]], None]) -> Any:
    """The stock `__init__`, run only after `check` accepted its arguments (defaults filled)."""
    stock = signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = stock.bind(self, *args, **kwargs)
        bound.apply_defaults()
        check(bound.arguments)
        original(self, *args, **kwargs)

    return __init__


def parameters(obj: Any) -> dict[str, inspect.Parameter]:
    return dict(signature(obj).parameters)


def prompt_lists(token_ids: Any) -> list[list[int]]:
    """`generate()`'s prompts (a tensor, or a list of lists or tensors) as lists of ints."""
    if hasattr(token_ids, "tolist"):
        return token_ids.tolist()
    return [t.tolist() if hasattr(t, "tolist") else list(t) for t in token_ids]


def config_field(
    module: Any, name: str, installed: type, field: str
) -> tuple[Verdict | None, inspect.Parameter | None]:
    """A probe's first half for a config field that a patch makes the stock ``name(...)``
    call pass: a verdict where that settles it (the stock call sets the field: not needed;
    the installed class lacks it: drift), else the installed class's parameter."""
    from spec_compat.engine.stock_source import stock_passes

    found = signature_text(installed)
    if stock_passes(module, name, field):
        return Verdict(Need.NOT_NEEDED, found, f"the stock call sets {field}"), None
    param = parameters(installed).get(field)
    if param is None:
        return Verdict(Need.UNKNOWN, found, f"{name} has no {field}"), None
    return None, param
