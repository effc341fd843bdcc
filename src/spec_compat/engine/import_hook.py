"""The registry's import hook: what happens just before a stock module is imported.

A `sys.meta_path` finder asks its registry (`before_import`) about each module being
imported.  The registry may refuse (a `Requirement` no patch can bridge raises
`UnsupportedDrift` with its reason, instead of a bare ImportError from speculators' own
code) or name imports to redirect (its `ImportPatch`es): the stock module's source is then
compiled with those `from … import` statements pointing at the new modules, or ask for a
stock module to be loaded here, unchanged, so that its post-import hooks (registered only
as its package was imported) fire.  Any other module is left to the normal finders.
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ast

#: old module -> (new module, the names that moved)
Moves = dict[str, tuple[str, frozenset[str]]]


class ImportHook:
    """A `sys.meta_path` finder (the protocol is `find_spec`; importlib.abc's base class
    would cost `apply()` the import of importlib.resources and tempfile)."""

    def __init__(self, before_import: Callable[[str], Moves | None]) -> None:
        self.before_import = before_import

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, fullname, path=None, target=None):
        moves = self.before_import(fullname)
        if moves is None:  # the normal finders (wrapt's included, wherever it sits) load it
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            return spec
        spec.loader = _RewritingLoader(fullname, spec.origin, moves)
        return spec


class _RewritingLoader(importlib.machinery.SourceFileLoader):
    """Compiles a stock module with some `from OLD import names` redirected to NEW."""

    def __init__(self, fullname: str, path: str, moves: Moves):
        super().__init__(fullname, path)
        self.moves = moves

    def get_code(self, fullname: str):  # always from source: no stale .pyc
        import ast  # only where an import is redirected (not with apply())

        source = self.get_data(self.path)
        tree = _redirect_imports(ast.parse(source, self.path), self.moves)
        return compile(tree, self.path, "exec", dont_inherit=True)

    def exec_module(self, module) -> None:
        super().exec_module(module)
        # This loader bypasses wrapt's import finder wherever that sits in sys.meta_path,
        # so the post-import hooks (every attribute patch) are fired here; wrapt pops them,
        # so a second notification from its own finder does nothing.
        import wrapt

        wrapt.notify_module_loaded(module)


def _redirect_imports(tree: ast.Module, moves: Moves) -> ast.Module:
    import ast

    class Redirect(ast.NodeTransformer):
        def visit_ImportFrom(self, node: ast.ImportFrom):
            if node.module not in moves:
                return node
            new_module, names = moves[node.module]
            moved = [a for a in node.names if a.name in names]
            kept = [a for a in node.names if a.name not in names]
            out = [ast.ImportFrom(module=new_module, names=moved, level=0)] if moved else []
            if kept:
                out.append(ast.ImportFrom(module=node.module, names=kept, level=node.level))
            return [ast.copy_location(n, node) for n in out]

    return ast.fix_missing_locations(Redirect().visit(tree))
