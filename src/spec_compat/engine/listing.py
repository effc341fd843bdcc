"""The registry's patches by name, known by their listing until their modules load.

`apply()` needs little of a patch: its name, side, stock module, target and whether it is
selected by default.  The generated `patches/_listing.py` (tools/patches_doc.py writes it
from the declarations) holds that, so `apply()` imports no patch module.  The declarations
load once a module they target is imported, and a listing they contradict is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import NamedTuple

from spec_compat.engine.patch import ImportPatch, Patch, Result, Side, State

AnyPatch = Patch | ImportPatch


class Listing(NamedTuple):
    """What `apply()` needs of a patch before its module is loaded: the generated
    `patches/_listing.py` holds one per patch (tools/patches_doc.py writes it from the
    declarations), so `apply()` imports no patch module; the registry loads them all, and
    checks each against its listing, once a module they target is imported."""

    name: str
    side: Side
    module: str
    qualified_target: str
    default: bool
    imports: bool  # an ImportPatch: decided while its stock module is imported

    @classmethod
    def of(cls, patch: Patch | ImportPatch) -> Listing:
        imports = isinstance(patch, ImportPatch)
        return cls(
            patch.name, patch.side, patch.module, patch.qualified_target, patch.default, imports
        )

    def result(self, state: State, reason: str = "", found: str = "") -> Result:
        return Result(self.name, self.side, self.qualified_target, state, reason, found)


class Declarations:
    """Patches by name: `listing` stands for them until `load()` returns them (on the first
    call of `all()`), then each must equal its entry."""

    def __init__(
        self,
        listing: tuple[Listing, ...] = (),
        load: Callable[[], Iterable[AnyPatch]] | None = None,
    ):
        self.listing = listing
        self._by_name = {entry.name: entry for entry in listing}
        self._load = load
        self._loading = False
        self._patches: dict[str, AnyPatch] = {}
        self._lock = threading.RLock()

    @property
    def loaded(self) -> bool:
        return self._load is None

    def add(self, patch: AnyPatch) -> AnyPatch:
        if patch.name in self._patches:
            raise ValueError(f"patch {patch.name!r} is registered twice")
        self._patches[patch.name] = patch
        return patch

    def all(self) -> dict[str, AnyPatch]:
        if self._load is not None:
            self._load_listed()
        return self._patches

    def module_of(self, name: str) -> str:
        entry = self._by_name.get(name)  # checked against the declaration once loaded
        return entry.module if entry is not None else self.all()[name].module

    def _load_listed(self) -> None:
        with self._lock:
            if self._load is None:
                return
            if self._loading:  # a patch module imported a stock module at its top level
                raise RuntimeError("spec_compat: a patch module imported a patched module")
            self._loading = True  # the modules import through the hook: it reads the listing
            try:
                loaded = tuple(self._load())
            finally:
                self._loading = False
            self._load = None
            declared = tuple(Listing.of(self.add(patch)) for patch in loaded)
            if declared != self.listing:  # never act on a listing its patches contradict
                stale = sorted(set(declared) ^ set(self.listing), key=lambda e: e.name)
                raise RuntimeError(
                    "spec_compat: the patch listing (patches/_listing.py) does not match the "
                    "declarations; run `python tools/patches_doc.py`.  Differing entries:\n"
                    + "\n".join(f"  {entry}" for entry in stale)
                )
