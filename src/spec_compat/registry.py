"""The patch registry: declarations, gating, apply/revert bookkeeping and results.

A patch replaces one name inside a speculators module (never a vLLM object), so other vLLM
users in the process keep stock vLLM.  Patches for a module that is not imported yet land
through a post-import hook, so `apply()` itself imports neither torch nor vllm.
"""

from __future__ import annotations

import enum
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

import wrapt

from . import gates
from .gates import Need, Verdict

Side = Literal["driver", "worker", "both"]  # both: the driver and every vLLM worker

#: Set by `apply()`: the comma-separated names of the chosen patches.  Every child process
#: inherits it; the start-up hook (`spec_compat.startup`) applies them there.
ENV_PATCHES = "SPEC_COMPAT_PATCHES"
#: Set by `apply()` beside it: "0" when the parent chose `strict=False`.
ENV_STRICT = "SPEC_COMPAT_STRICT"


@dataclass(frozen=True)
class Patch:
    """A declared patch: what it replaces, when, and how.

    `wrap(original)` returns the replacement for `module.target`; `probe(module)` inspects the
    installed code.  `speculators` says which stock code the patch is written against;
    `vllm` decides only when the probe cannot (`Need.UNDECIDED`).
    """

    name: str
    side: Side
    module: str
    target: str
    summary: str
    probe: Callable[[ModuleType], Verdict]
    wrap: Callable[[Any], Any]
    speculators: str = ""
    vllm: str = ""
    platform: Literal["cpu", "gpu"] | None = None  # gpu: any platform but vLLM's CPU one
    default: bool = True  # applied by a plain apply(); False: only when named in `only`
    #: names called by the stock module whose signature drift this patch repairs; the
    #: generic drift check (spec_compat.drift) counts those calls as supported
    fixes: tuple[str, ...] = ()

    @property
    def qualified_target(self) -> str:
        return f"{self.module}.{self.target}"


class State(enum.Enum):
    PENDING = "pending import"  # selected; lands when its module is imported
    APPLIED = "applied"
    NOT_NEEDED = "not needed"
    SKIPPED = "skipped"
    UNSUPPORTED = "unsupported drift"


@dataclass
class Result:
    """What happened to one patch: the structured answer of `status()`."""

    name: str
    side: Side
    target: str
    state: State
    reason: str = ""
    found: str = ""

    def as_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "side": self.side,
            "target": self.target,
            "state": self.state.value,
            "reason": self.reason,
            "found": self.found,
        }


class UnsupportedDrift(RuntimeError):
    """The installed code has a shape no patch knows: refuse rather than guess."""

    def __init__(self, results: Iterable[Result]):
        self.results = list(results)
        lines = [
            f"  - {r.name} (target {r.target}): {r.reason}\n      found: {r.found}"
            for r in self.results
        ]
        super().__init__(
            "spec_compat refuses: the installed code has a shape it does not know how to "
            "adapt (refused before any model loads):\n"
            + "\n".join(lines)
            + "\nRun `python -m spec_compat doctor` for the full report.  Experts can skip "
            "the generic call check with spec_compat.apply(strict=False)."
        )


def _resolve(module: ModuleType, target: str) -> tuple[Any, str]:
    """The object owning the last component of `target`, and that component."""
    *path, attr = target.split(".")
    owner: Any = module
    for part in path:
        owner = getattr(owner, part)
    return owner, attr


@dataclass
class _Applied:
    patch: Patch
    owner: Any
    attr: str
    original: Any
    replacement: Any
    had_own: bool  # the owner defined the attribute itself (not inherited)


@dataclass
class Registry:
    patches: dict[str, Patch] = field(default_factory=dict)
    results: dict[str, Result] = field(default_factory=dict)
    _selected: list[str] = field(default_factory=list)
    _applied: list[_Applied] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    #: called with (module, names of the patches applied to it) after a module is patched;
    #: returns unsupported findings, raised as UnsupportedDrift when `strict`
    preflight: Callable[[ModuleType, list[str]], list[Result]] | None = None
    strict: bool = True
    findings: list[Result] = field(default_factory=list)

    def register(self, patch: Patch) -> Patch:
        if patch.name in self.patches:
            raise ValueError(f"patch {patch.name!r} is registered twice")
        self.patches[patch.name] = patch
        return patch

    # -- selection ------------------------------------------------------------------------

    def select(
        self,
        only: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        side: Side | None = None,
    ) -> list[Patch]:
        only_set = set(only) if only is not None else None
        exclude_set = set(exclude or ())
        unknown = ((only_set or set()) | exclude_set) - set(self.patches)
        if unknown:
            raise ValueError(
                f"unknown patch name(s) {sorted(unknown)}; known: {sorted(self.patches)}"
            )
        chosen = []
        for p in self.patches.values():
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
        with self._lock:
            self.strict = strict
            chosen = self.select(only, exclude, side)
            for p in chosen:
                if p.name not in self._selected:
                    self._selected.append(p.name)
                    self.results[p.name] = Result(p.name, p.side, p.qualified_target, State.PENDING)
            if side is None:  # a worker's partial apply keeps the driver's full selection
                os.environ[ENV_PATCHES] = ",".join(self._selected)
            for module_name in dict.fromkeys(p.module for p in chosen):
                module = sys.modules.get(module_name)
                if module is not None:
                    self._apply_module(module)
                else:  # wrapt's hooks fire once; _apply_module ignores repeats
                    wrapt.register_post_import_hook(self._on_import, module_name)
            return [self.results[n] for n in self._selected]

    def _on_import(self, module: ModuleType) -> None:
        with self._lock:
            if self._selected:
                self._apply_module(module)

    def _apply_module(self, module: ModuleType) -> None:
        """Gate and apply every selected, pending patch for `module`; refuse unknown shapes."""
        pending = [
            self.patches[n]
            for n in self._selected
            if n in self.patches  # import-time patches are recorded here too
            and self.patches[n].module == module.__name__
            and self.results[n].state is State.PENDING
        ]
        decisions = [(p, self.gate(p, module)) for p in pending]
        refused = [r for _, r in decisions if r.state is State.UNSUPPORTED]
        for patch, result in decisions:
            if refused and result.state is State.APPLIED:
                result.state, result.reason = State.SKIPPED, "another patch of this module refused"
            self.results[patch.name] = result
        if refused:
            raise UnsupportedDrift(refused)
        for patch, result in decisions:
            if result.state is State.APPLIED:
                self._replace(patch, module)
        if self.preflight is not None:
            applied = [
                r.name
                for r in self.results.values()
                if r.state is State.APPLIED and r.name in self.patches
            ]
            found = self.preflight(module, applied)
            self.findings.extend(found)
            if found and self.strict:
                raise UnsupportedDrift(found)

    def gate(self, patch: Patch, module: ModuleType) -> Result:
        """Decide one patch without applying it; `State.APPLIED` here means 'apply it'."""

        def result(state: State, reason: str, found: str = "") -> Result:
            return Result(patch.name, patch.side, patch.qualified_target, state, reason, found)

        spec_version = gates.speculators_version()
        if not gates.in_range(spec_version, patch.speculators):
            return result(
                State.NOT_NEEDED,
                f"written for speculators {patch.speculators}; installed {spec_version}",
            )
        if patch.platform == "cpu" and not _platform_is_cpu():
            return result(State.NOT_NEEDED, "only on vLLM's CPU platform")
        if patch.platform == "gpu" and _platform_is_cpu():
            return result(State.NOT_NEEDED, "not on vLLM's CPU platform")
        try:
            verdict = patch.probe(module)
        except Exception as exc:  # a probe that cannot even look is drift too
            verdict = Verdict(Need.UNKNOWN, f"{type(exc).__name__}: {exc}", "probe failed")
        if verdict.need is Need.UNDECIDED:
            version = gates.vllm_version()
            inside = gates.in_range(version, patch.vllm)
            verdict = Verdict(
                Need.NEEDED if inside else Need.NOT_NEEDED,
                verdict.found,
                f"vLLM {version} {'in' if inside else 'outside'} {patch.vllm}"
                + (f" ({verdict.reason})" if verdict.reason else ""),
            )
        state = {
            Need.NEEDED: State.APPLIED,
            Need.NOT_NEEDED: State.NOT_NEEDED,
            Need.UNKNOWN: State.UNSUPPORTED,
        }[verdict.need]
        return result(state, verdict.reason, verdict.found)

    def _replace(self, patch: Patch, module: ModuleType) -> None:
        owner, attr = _resolve(module, patch.target)
        had_own = attr in vars(owner)
        original = vars(owner)[attr] if had_own else getattr(owner, attr)
        replacement = patch.wrap(original)
        setattr(owner, attr, replacement)
        self._applied.append(_Applied(patch, owner, attr, original, replacement, had_own))

    def revert(self) -> None:
        """Restore every replaced name to the exact original object, newest first."""
        with self._lock:
            for rec in reversed(self._applied):
                if rec.had_own:
                    setattr(rec.owner, rec.attr, rec.original)
                else:
                    delattr(rec.owner, rec.attr)
            self._applied.clear()
            self._selected.clear()
            self.results.clear()
            self.findings.clear()
            os.environ.pop(ENV_PATCHES, None)

    def record(self, result: Result) -> None:
        """Record a decision made outside the registry (import-time patches, refusals)."""
        with self._lock:
            if result.name not in self._selected:
                self._selected.append(result.name)
            self.results[result.name] = result

    def status(self) -> list[Result]:
        with self._lock:
            return [self.results[n] for n in self._selected]


def _platform_is_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())
