"""Probes of the installed code: the verdict a patch's probe returns, signatures, and
whether the stock calls bind against them (the stock code itself is read by
`spec_compat.engine.stock_source`).  Nothing here imports vllm or torch until a probe runs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import inspect

    from spec_compat.engine.stock_source import StockCall


class Need(enum.Enum):
    NEEDED = "needed"
    NOT_NEEDED = "not needed"
    UNDECIDED = "undecided"  # the code's shape cannot tell: the patch's vLLM range decides
    UNKNOWN = "unknown shape"  # neither the old nor a known new shape: refuse


class Verdict(NamedTuple):
    need: Need
    found: str  # what the probe saw (a signature, an attribute), shown by doctor and errors
    reason: str = ""


def signature(obj: Any) -> inspect.Signature:
    import inspect  # here, not at the top: with the probes, not with apply()

    return inspect.signature(obj)


def signature_text(obj: Any) -> str:
    try:
        return f"{getattr(obj, '__qualname__', obj)}{signature(obj)}"
    except (TypeError, ValueError):
        return repr(obj)


def bind_error(obj: Any, call: StockCall) -> str | None:
    """Why the stock call would not bind against `obj`'s installed signature (None: it binds)."""
    try:
        signature(obj).bind(*[None] * call.n_positional, **dict.fromkeys(call.keywords))
    except TypeError as exc:
        return str(exc)
    return None


def binding_probe(
    module: ModuleType,
    callee: str,
    installed: Any,
    fixable: Callable[[StockCall, Mapping[str, inspect.Parameter]], bool],
) -> Verdict:
    """The common probe: does every stock call to `callee` bind against `installed`?

    Binds: not needed.  Fails in a way `fixable(call, parameters)` recognises: needed.
    Fails otherwise: unknown shape, with the installed signature in the verdict.
    """
    from spec_compat.engine.stock_source import stock_calls

    found = signature_text(installed)
    calls = stock_calls(module, callee)
    if not calls:
        return Verdict(Need.UNKNOWN, found, f"no call to {callee} in {module.__name__}")
    errors = [(c, err) for c in calls if (err := bind_error(installed, c))]
    if not errors:
        return Verdict(Need.NOT_NEEDED, found, "the stock call binds")
    params = signature(installed).parameters
    if all(fixable(c, params) for c, _ in errors):
        return Verdict(Need.NEEDED, found, "; ".join(f"line {c.line}: {e}" for c, e in errors))
    call, err = errors[0]
    return Verdict(Need.UNKNOWN, found, f"line {call.line}: {err}")


def missing_and_unexpected(
    call: StockCall, params: Mapping[str, inspect.Parameter]
) -> tuple[set[str], set[str]]:
    """Required parameters the stock call omits, and keywords it passes that do not exist."""
    named = list(params.values())[call.n_positional :]
    required = {
        p.name
        for p in named
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    open_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unexpected = set() if open_kw else set(call.keywords) - set(params)
    return required - call.keywords, unexpected


def first_attr(names: Iterable[str]) -> Any:
    """Import the first `module:attr` that exists (vLLM moves helpers between modules)."""
    import importlib

    missing = []
    for spec in names:
        mod_name, attr = spec.split(":")
        try:
            return getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError):
            missing.append(spec)
    raise ImportError(f"none of {missing} exists")
