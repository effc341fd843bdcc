"""Generic drift detection: every call the stock extractor makes into vLLM, bound against
the installed vLLM.

The stock modules are read with `ast` (nothing of theirs runs).  A call is resolved when
its callee is a name imported from `vllm…` (a constructor or function), or a method on an
attribute assigned from such a constructor (`self.executor = MultiprocExecutor(...)` makes
`self.executor.collective_rpc(...)` a `MultiprocExecutor.collective_rpc` call).  Each is
bound with `inspect.Signature.bind` against the installed object, with placeholders for the
arguments the stock code passes.  A call that does not bind, or a name that no longer
imports, is drift; it is *supported* when an applied patch replaces that name in the stock
module, and *unsupported* otherwise.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import asdict, dataclass
from typing import Any

from spec_compat.engine.probes import signature_text
from spec_compat.engine.stock_source import dotted_name
from spec_compat.engine.stock_source import tree as stock_tree


@dataclass
class TouchPoint:
    module: str  # the stock module making the call
    line: int
    call: str  # as written, e.g. "self.executor.collective_rpc"
    name: str  # the stock module's name it goes through, e.g. "MultiprocExecutor"
    target: str  # the installed object, e.g. "vllm.v1...:MultiprocExecutor.collective_rpc"
    keywords: list[str]
    n_positional: int
    present: bool = True
    binds: bool | None = None  # None: not checkable (a ** argument)
    error: str = ""
    signature: str = ""
    covered_by: list[str] | None = None

    @property
    def drift(self) -> bool:
        return not self.present or self.binds is False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


VENDOR_ROOTS = ("vllm",)


def _vllm_imports(tree: ast.Module, roots: tuple[str, ...] = VENDOR_ROOTS) -> dict[str, str]:
    """local name -> "module:attr" for every `from vllm… import name` in the module."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}:{alias.name}"
    return names


def _typed_attributes(tree: ast.Module, imports: dict[str, str]) -> dict[str, str]:
    """`self.x` / `x` -> "module:Class" when assigned from a call to an imported vLLM class."""
    typed = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Call):
            callee = dotted_name(node.value.func)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if callee in imports:
                for target in targets:
                    if (name := dotted_name(target)) is not None:
                        typed[name] = imports[callee]
    return typed


def _resolve(spec: str) -> Any:
    module_name, _, path = spec.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def scan(
    module_name: str,
    roots: tuple[str, ...] = VENDOR_ROOTS,
    moved: dict[str, str] | None = None,
) -> list[TouchPoint]:
    """Every resolvable call from `module_name` into vLLM (packages `roots`), bound against
    the installed code.  `moved` maps "old.module:name" to "new.module:name" for imports an
    import-time patch redirects."""
    tree = stock_tree(module_name)
    imports = {k: (moved or {}).get(v, v) for k, v in _vllm_imports(tree, roots).items()}
    typed = _typed_attributes(tree, imports)
    points: list[TouchPoint] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (callee := dotted_name(node.func)) is None:
            continue
        if callee in imports:
            target, is_method, name = imports[callee], False, callee
        elif "." in callee and callee.rsplit(".", 1)[0] in typed:
            owner, method = callee.rsplit(".", 1)
            target, is_method = f"{typed[owner]}.{method}", True
            name = next(k for k, v in imports.items() if v == typed[owner])
        else:
            continue
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        point = TouchPoint(module_name, node.lineno, callee, name, target, keywords, len(node.args))
        try:
            obj = _resolve(target)
        except (ImportError, AttributeError) as exc:
            point.present, point.error = False, f"{type(exc).__name__}: {exc}"
            points.append(point)
            continue
        point.signature = signature_text(obj)
        if any(k.arg is None for k in node.keywords) or any(
            isinstance(a, ast.Starred) for a in node.args
        ):
            points.append(point)  # * or ** arguments: cannot bind statically
            continue
        placeholders = [None] * (len(node.args) + (1 if is_method else 0))
        try:
            inspect.signature(obj).bind(*placeholders, **dict.fromkeys(keywords))
            point.binds = True
        except TypeError as exc:
            point.binds, point.error = False, str(exc)
        except ValueError:  # no signature (builtins)
            pass
        points.append(point)
    return sorted(points, key=lambda p: p.line)


def check(
    module_name: str,
    patches: list[Any],
    roots: tuple[str, ...] = VENDOR_ROOTS,
    moved: dict[str, str] | None = None,
) -> list[TouchPoint]:
    """`scan()`, with each drifting call's covering patches (those whose `fixes` name it)."""
    points = scan(module_name, roots, moved)
    for point in points:
        if point.drift:
            point.covered_by = [
                p.name for p in patches if p.module == module_name and point.name in p.fixes
            ]
    return points


def moved_imports(import_patches: list[Any]) -> dict[str, str]:
    """The redirects of applied import-time patches, in `scan(moved=...)` form."""
    return {
        f"{p.old_module}:{name}": f"{p.new_module}:{name}"
        for p in import_patches
        for name in p.names
    }
