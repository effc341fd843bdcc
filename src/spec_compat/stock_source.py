"""The stock speculators code, read with `ast`: nothing of it runs.

Probes ask what the stock source calls and mentions (`stock_calls`, `stock_mentions`); the
generic drift check (`spec_compat.drift`) walks the same trees.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from types import ModuleType


@dataclass(frozen=True)
class StockCall:
    """One call in speculators' source: `callee(<n positional>, kw1=…, kw2=…)`."""

    callee: str
    line: int
    n_positional: int
    keywords: frozenset[str] = field(default_factory=frozenset)


def dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


@functools.cache
def tree(module_name: str) -> ast.Module:
    import importlib.util

    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(module_name)
    with open(spec.origin, encoding="utf-8") as fh:
        return ast.parse(fh.read(), filename=spec.origin)


def stock_calls(module: ModuleType | str, callee: str) -> list[StockCall]:
    """Every call to `callee` (a dotted name as written in the source) in a stock module."""
    name = module if isinstance(module, str) else module.__name__
    calls = []
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Call) and dotted_name(node.func) == callee:
            kws = frozenset(k.arg for k in node.keywords if k.arg is not None)
            calls.append(StockCall(callee, node.lineno, len(node.args), kws))
    return calls


def stock_passes(module: ModuleType | str, callee: str, keyword: str) -> bool:
    """True when every stock call to `callee` passes `keyword` (and there is one)."""
    calls = stock_calls(module, callee)
    return bool(calls) and all(keyword in c.keywords for c in calls)


def stock_mentions(module: ModuleType | str, dotted: str) -> bool:
    """True when the stock module's source names `dotted` (e.g. `torch.cuda.mem_get_info`)."""
    name = module if isinstance(module, str) else module.__name__
    return any(
        dotted_name(node) == dotted
        for node in ast.walk(tree(name))
        if isinstance(node, ast.Attribute | ast.Name)
    )
