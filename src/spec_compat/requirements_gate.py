"""What happens just before a stock module is imported: refusals and import rewrites.

A stock module that cannot even import on the installed vLLM (a name it imports does not
exist there) would fail with a bare ImportError from speculators' own code.  Two remedies,
both declared as data and both acting on the stock module only:

- `Requirement`: a pair no patch can bridge; the import raises `UnsupportedDrift` with the
  reason instead.
- `ImportPatch` (declared in `spec_compat.patches`): a name vLLM moved to another module;
  the stock module's source is compiled with that `from … import` pointing at the new
  module.  vLLM itself is untouched.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass

from . import gates
from .registry import Result, State, UnsupportedDrift


@dataclass(frozen=True)
class Requirement:
    name: str
    module: str
    speculators: str
    check: Callable[[], str | None]

    def refusal(self) -> Result | None:
        if not gates.in_range(gates.speculators_version(), self.speculators):
            return None
        reason = self.check()
        if reason is None:
            return None
        return Result(
            self.name,
            "driver",
            self.module,
            State.UNSUPPORTED,
            reason,
            f"vLLM {gates.vllm_version()}, speculators {gates.speculators_version()}",
        )


def _exists(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name) is not None
    except ImportError:
        return False


def _v04_hashing() -> str | None:
    if _exists("vllm.utils.hashing"):
        return None
    return (
        "speculators 0.4.x imports vllm.utils.hashing, which vLLM adds in 0.11.1 (and passes "
        "Scheduler(block_size=), also 0.11.1+); use speculators 0.3.0 with this vLLM"
    )


REQUIREMENTS = (
    Requirement(
        "v04_needs_vllm_utils_hashing",
        "speculators.data_generation.vllm_hidden_states_generator",
        ">=0.4,<0.5",
        _v04_hashing,
    ),
)


def refusals(module_name: str | None = None) -> list[Result]:
    return [
        r
        for req in REQUIREMENTS
        if module_name in (None, req.module) and (r := req.refusal()) is not None
    ]


class _RewritingLoader(importlib.machinery.SourceFileLoader):
    """Compiles a stock module with some `from OLD import names` redirected to NEW."""

    def __init__(self, fullname: str, path: str, moves: dict[str, tuple[str, frozenset[str]]]):
        super().__init__(fullname, path)
        self.moves = moves

    def get_code(self, fullname: str):  # always from source: no stale .pyc
        source = self.get_data(self.path)
        tree = _redirect_imports(ast.parse(source, self.path), self.moves)
        return compile(tree, self.path, "exec", dont_inherit=True)

    def exec_module(self, module) -> None:
        super().exec_module(module)
        # This loader bypasses wrapt's import finder wherever that sits in sys.meta_path,
        # so the post-import hooks (every registry patch) are fired here; wrapt pops them,
        # so a second notification from its own finder does nothing.
        import wrapt

        wrapt.notify_module_loaded(module)


def _redirect_imports(tree: ast.Module, moves: dict[str, tuple[str, frozenset[str]]]):
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


class PreImportGate(importlib.abc.MetaPathFinder):
    """Checks a stock module's requirements, and applies its import patches, when it is
    about to be imported."""

    def __init__(self) -> None:
        self.enabled = False
        self.import_patches: list = []  # spec_compat.patches.IMPORT_PATCHES, once selected
        self.on_decision: Callable[[Result], None] | None = None

    def find_spec(self, fullname, path=None, target=None):
        if not self.enabled:
            return None
        if any(req.module == fullname for req in REQUIREMENTS):
            found = refusals(fullname)
            if found:
                raise UnsupportedDrift(found)
        patches = [p for p in self.import_patches if p.module == fullname]
        if not patches:
            return None  # the normal finders load it
        moves = {}
        for patch in patches:
            result = patch.decide()
            if self.on_decision is not None:
                self.on_decision(result)
            if result.state is State.UNSUPPORTED:
                raise UnsupportedDrift([result])
            if result.state is State.APPLIED:
                moves[patch.old_module] = (patch.new_module, frozenset(patch.names))
        if not moves:  # the normal finders (wrapt's included, wherever it sits) load it
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            return spec
        spec.loader = _RewritingLoader(fullname, spec.origin, moves)
        return spec


GATE = PreImportGate()


def install() -> None:
    GATE.enabled = True
    if GATE not in sys.meta_path:
        sys.meta_path.insert(0, GATE)


def uninstall() -> None:
    GATE.enabled = False
