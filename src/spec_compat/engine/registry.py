"""The patch registry: selection, gating, apply/revert bookkeeping and results.

One registry holds both kinds of patch (`spec_compat.engine.patch`) and owns the import hook that
applies import-time patches and refuses unbridgeable pairs (`spec_compat.engine.import_hook`).
An attribute patch replaces one name inside a speculators module (never a vLLM object), so
other vLLM users in the process keep stock vLLM.  Patches for a module that is not imported
yet land through a post-import hook, so `apply()` itself imports neither torch nor vllm.
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from spec_compat.engine.import_hook import ImportHook, Moves
from spec_compat.engine.listing import AnyPatch, Declarations, Listing
from spec_compat.engine.names import ENV_PATCHES, ENV_STRICT
from spec_compat.engine.patch import ImportPatch, Patch, Result, Side, State, UnsupportedDrift
from spec_compat.engine.replacements import Replacements
from spec_compat.engine.requirements import Requirement
from spec_compat.engine.selection import clear as clear_selection
from spec_compat.engine.selection import export as export_selection

__all__ = [
    "ENV_PATCHES",
    "ENV_STRICT",
    "ImportPatch",
    "Patch",
    "Registry",
    "Result",
    "Side",
    "State",
    "UnsupportedDrift",
]


class Registry:
    def __init__(
        self,
        *,
        requirements: tuple[Requirement, ...] = (),
        renamed: dict[str, str] | None = None,
        preflight: Callable[[ModuleType, list[str]], list[Result]] | None = None,
        listing: tuple[Listing, ...] = (),
        load: Callable[[], Iterable[AnyPatch]] | None = None,
    ):
        """`listing` and `load`: patches known by their listing until `load()` returns their
        declarations (`patches.LISTING`, `patches.load`: `spec_compat.engine.listing`)."""
        self.declarations = Declarations(listing, load)
        self.results: dict[str, Result] = {}
        #: refused as their module is imported (`spec_compat.engine.requirements`)
        self.requirements = requirements
        #: former patch names -> the patch that replaced them (accepted with a warning)
        self.renamed = renamed or {}
        #: called with (module, names of the patches applied to it) after a module is
        #: patched; returns unsupported findings, raised as UnsupportedDrift when `strict`
        self.preflight = preflight
        self.strict = True  # apply(strict=...) sets it
        self.findings: list[Result] = []
        self._selected: list[str] = []
        self._replacements = Replacements()
        self._lock = threading.RLock()
        self._hook: ImportHook | None = None
        self._order: list[AnyPatch] | None = None
        #: top-level package -> its modules to patch once imported (`_when_imported`)
        self._deferred: dict[str, list[str]] = {}

    @property
    def patches(self) -> dict[str, AnyPatch]:
        """Every declaration, by name (the listed ones are loaded on first use)."""
        return self.declarations.all()

    def register(self, patch: AnyPatch) -> AnyPatch:
        self._order = None
        return self.declarations.add(patch)

    def listed(self) -> list[Listing]:
        """Every patch as selection sees it: the listing while the declarations are not
        loaded, else each declaration's, in application order."""
        if not self.declarations.loaded:
            return list(self.declarations.listing)
        return [Listing.of(p) for p in self.ordered()]

    def ordered(self) -> list[AnyPatch]:
        """Every patch in application order: each stack as its patches declare it
        (`spec_compat.engine.stacks`), registration order otherwise; `StackError` if the declared
        relations are broken or circular."""
        if self._order is None:
            from spec_compat.engine import stacks  # with the declarations, not with apply()

            self._order = stacks.order(list(self.patches.values()))
        return self._order

    def stacks(self) -> list[tuple[str, list[AnyPatch]]]:
        """Every target more than one patch wraps, with its patches innermost first."""
        from spec_compat.engine import stacks

        return stacks.stacks(self.ordered())

    # -- selection ------------------------------------------------------------------------

    def current_names(self, names: Iterable[str]) -> list[str]:
        """Patch names with former names mapped to the patch that replaced them (warned)."""
        current = []
        for name in names:
            if name in self.renamed:
                warnings.warn(
                    f"patch {name!r} is now part of {self.renamed[name]!r}; use that name",
                    DeprecationWarning,
                    stacklevel=5,
                )
            current.append(self.renamed.get(name, name))
        return list(dict.fromkeys(current))

    def select(
        self,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        side: Side | None = None,
    ) -> list[Listing]:
        listed = self.listed()
        known = {p.name for p in listed}
        only_set = set(self.current_names(only)) if only is not None else None
        exclude_set = set(self.current_names(exclude or ()))
        unknown = ((only_set or set()) | exclude_set) - known
        if unknown:
            raise ValueError(f"unknown patch name(s) {sorted(unknown)}; known: {sorted(known)}")
        chosen = []
        for p in listed:
            wanted = p.name in only_set if only_set is not None else p.default
            if wanted and p.name not in exclude_set and (side is None or p.side in (side, "both")):
                chosen.append(p)
        return chosen

    # -- apply / revert -------------------------------------------------------------------

    def apply(
        self,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        side: Side | None = None,
        strict: bool = True,
    ) -> list[Result]:
        """Select patches and apply each now or when its module is imported; a plain call
        (`side=None`) also exports the selection to every child process (`selection.export`)."""
        with self._lock:
            self.strict = strict
            chosen = self.select(only, exclude, side)
            for p in chosen:
                if p.name not in self._selected:
                    self._selected.append(p.name)
                    if not p.imports:  # an import patch is decided as it imports
                        self.results[p.name] = p.result(State.PENDING)
            if side is None:  # a worker's partial apply keeps the driver's full selection
                export_selection(self._selected, strict)
            if self._hook is None:
                self._hook = ImportHook(self._before_import)
            self._hook.install()
            for module_name in dict.fromkeys(p.module for p in chosen if not p.imports):
                module = sys.modules.get(module_name)
                if module is not None:
                    self._apply_module(module)
                else:
                    self._when_imported(module_name)
            return self.status()

    def _when_imported(self, module_name: str) -> None:
        """Patch `module_name` once it is imported, from wrapt's post-import hook (which
        fires once; `_apply_module` ignores repeats).  Until the module's top-level package
        is imported the hook waits in `_deferred`: importing wrapt would cost `apply()`
        about a fifth of its time."""
        root = module_name.partition(".")[0]
        if root in sys.modules or root == module_name:
            _register_post_import_hook(self._on_import, module_name)
        else:
            self._deferred.setdefault(root, []).append(module_name)

    def refusals(self, module_name: str | None = None) -> list[Result]:
        """The requirements that refuse the installed pair (for `module_name`, or all)."""
        return [
            r
            for req in self.requirements
            if module_name in (None, req.module) and (r := req.refusal()) is not None
        ]

    def _before_import(self, module_name: str) -> Moves | None:
        """The import hook's question: refuse this module, redirect some of its imports, or
        load it through the hook's loader (`{}`: its post-import hooks are registered only
        now); None: leave it to the normal finders."""
        with self._lock:
            waiting = self._deferred.pop(module_name.partition(".")[0], [])
        for name in waiting:  # the stock modules' package: their post-import hooks now
            _register_post_import_hook(self._on_import, name)
        watched = any(req.module == module_name for req in self.requirements)
        if watched and (found := self.refusals(module_name)):
            raise UnsupportedDrift(found)
        moves: Moves = {}
        with self._lock:
            pending = self._pending(module_name, ImportPatch)
        for patch in pending:  # deciding imports vLLM: not under the lock
            result = self.decide(patch, None)
            with self._lock:
                self.results[patch.name] = result
            if result.state is State.UNSUPPORTED:
                raise UnsupportedDrift([result])
            if result.state is State.APPLIED:
                moves[patch.old_module] = (patch.new_module, frozenset(patch.names))
        # a stock module whose package went past this hook: wrapt's finder, inserted just
        # now, would miss this very import, so the hook's loader fires the hooks instead
        return moves if moves or module_name in waiting else None

    def _pending(self, module_name: str, kind: type) -> list[Any]:
        """The selected, undecided patches of `kind` for `module_name`, in application
        order (declarations load only when there is one)."""
        waiting = {
            n
            for n in self._selected
            if self.declarations.module_of(n) == module_name
            and (n not in self.results or self.results[n].state is State.PENDING)
        }
        if not waiting:
            return []
        return [p for p in self.ordered() if p.name in waiting and isinstance(p, kind)]

    def _on_import(self, module: ModuleType) -> None:
        with self._lock:
            if self._selected:
                self._apply_module(module)

    def _apply_module(self, module: ModuleType) -> None:
        """Gate and apply every selected, pending patch for `module`; refuse unknown shapes."""
        decisions = self.decide_all(self._pending(module.__name__, Patch), module)
        refused = [r for _, r in decisions if r.state is State.UNSUPPORTED]
        for patch, result in decisions:
            if refused and result.state is State.APPLIED:
                result.state, result.reason = State.SKIPPED, "another patch of this module refused"
            self.results[patch.name] = result
        if refused:
            raise UnsupportedDrift(refused)
        for patch, result in decisions:
            if result.state is State.APPLIED:
                self._replacements.replace(module, patch.target, patch.wrap, patch.name)
        if self.preflight is not None:
            applied = [
                n
                for n, r in self.results.items()
                if r.state is State.APPLIED and isinstance(self.patches.get(n), Patch)
            ]
            found = self.preflight(module, applied)
            self.findings.extend(found)
            if found and self.strict:
                raise UnsupportedDrift(found)

    def decide_all(
        self, patches: list[AnyPatch], module: ModuleType | None = None
    ) -> list[tuple[AnyPatch, Result]]:
        """Decide the patches of one stock module (`module`, or each one's from sys.modules)
        together: one that a patch applying here supersedes reports `State.SUPERSEDED`."""
        found = {
            p.name: self.decide(p, module if module is not None else sys.modules.get(p.module))
            for p in patches
        }
        from spec_compat.engine import stacks

        stacks.supersede(found, self.patches, self.results)
        return [(p, found[p.name]) for p in patches]

    def decide(self, patch: AnyPatch, module: ModuleType | None) -> Result:
        """Decide one patch without applying it; `State.APPLIED` here means 'apply it'."""
        missing = [n for n in patch.requires if n not in self._selected]
        if missing and patch.name in self._selected:
            return patch.result(State.SKIPPED, f"needs {', '.join(missing)} selected too")
        return patch.decide(module)

    def revert(self) -> None:
        """Restore every replaced name to the exact original object, newest first."""
        with self._lock:
            self._replacements.restore()
            self._deferred.clear()
            self._selected.clear()
            self.results.clear()
            self.findings.clear()
            if self._hook is not None:
                self._hook.uninstall()
            clear_selection()

    def status(self) -> list[Result]:
        with self._lock:
            return [self.results[n] for n in self._selected if n in self.results]


def _register_post_import_hook(hook: Callable[[ModuleType], None], module_name: str) -> None:
    import wrapt

    wrapt.register_post_import_hook(hook, module_name)


#: the registry `spec_compat.apply()` uses in this process (set by `spec_compat.api`)
_PROCESS: Registry | None = None


def set_process_registry(registry: Registry) -> None:
    """Name this process's registry, so that code below the facade (a patch, the model
    checks) can ask a patch's state without importing the facade back."""
    global _PROCESS
    _PROCESS = registry


def process_registry() -> Registry | None:
    return _PROCESS
