"""The stock speculators code, read with `ast`: nothing of it runs.

Probes ask what the stock source calls and mentions (`stock_calls`, `stock_mentions`); the
generic drift check (`spec_compat.engine.drift`) walks the same trees.
"""

from __future__ import annotations

import ast
import functools
from types import ModuleType
from typing import NamedTuple


class StockCall(NamedTuple):
    """One call in speculators' source: `callee(<n positional>, kw1=…, kw2=…)`."""

    callee: str
    line: int
    n_positional: int
    keywords: frozenset[str] = frozenset()


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


def _first_argument(node: ast.Call) -> object:
    first = node.args[0] if node.args else None
    return first.value if isinstance(first, ast.Constant) else None


def stock_ignores_result(module: ModuleType | str, callee: str, method: str | None = None) -> bool:
    """True when the stock code never reads what `callee(...)` returns (and calls it at
    least once); `method`: only the calls whose first argument is that string.  A value is
    ignored when its call is a statement of its own, or when it is assigned to a name that
    is only ever passed, whole, to calls whose values are ignored in turn."""
    name = module if isinstance(module, str) else module.__name__
    parents = {child: node for node in ast.walk(tree(name)) for child in ast.iter_child_nodes(node)}

    def ignored(call: ast.Call) -> bool:
        parent = parents.get(call)
        if isinstance(parent, ast.Expr):
            return True
        if not (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
        ):
            return False
        var = parent.targets[0].id
        scope = parent
        while scope in parents and not isinstance(scope, ast.FunctionDef):
            scope = parents[scope]
        reads = [
            n
            for n in ast.walk(scope)
            if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load)
        ]
        return all(
            isinstance(user := parents.get(read), ast.Call) and read in user.args and ignored(user)
            for read in reads
        )

    calls = [
        node
        for node in ast.walk(tree(name))
        if isinstance(node, ast.Call)
        and dotted_name(node.func) == callee
        and (method is None or _first_argument(node) == method)
    ]
    return bool(calls) and all(ignored(call) for call in calls)
