"""What a patch is: a frozen declaration, decided the same way whatever its kind.

Two kinds, one protocol (`decide(module) -> Result`):

- `Patch` replaces one name of a stock module, `module.target`, with `wrap(original)` once
  the module is imported.  `wrap` holds behaviour only: the registry `stamp`s every
  replacement with what tracebacks, pickling, doctor and revert need.
- `ImportPatch` redirects one `from old import names` in a stock module's source while the
  module is imported (a name vLLM moved); vLLM itself is untouched.

`decide` gates on the speculators line, then the platform, then the patch's probe of the
installed code; the vLLM range decides only where the probe cannot (`Need.UNDECIDED`).
"""

from __future__ import annotations

import enum
import importlib
import sys
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any, Literal, NamedTuple

from spec_compat.engine import versions
from spec_compat.engine.names import GENERATOR
from spec_compat.engine.probes import Need, Verdict

Side = Literal["driver", "worker", "both"]  # both: the driver and every vLLM worker


class State(enum.Enum):
    PENDING = "pending import"  # selected; lands when its module is imported
    APPLIED = "applied"
    NOT_NEEDED = "not needed"
    SKIPPED = "skipped"
    SUPERSEDED = "superseded"  # needed, but a patch that makes it moot applies instead
    UNSUPPORTED = "unsupported drift"


_STATE_OF = {
    Need.NEEDED: State.APPLIED,
    Need.NOT_NEEDED: State.NOT_NEEDED,
    Need.UNKNOWN: State.UNSUPPORTED,
}


class Result:
    """What happened to one patch: the structured answer of `status()`.  Mutable: the
    registry settles `state` and `reason` as it applies a module's patches together.  (Not a
    dataclass: importing `dataclasses` alone cost `apply()` ~25 ms.)"""

    __slots__ = ("found", "name", "reason", "side", "state", "target")

    def __init__(
        self, name: str, side: Side, target: str, state: State, reason: str = "", found: str = ""
    ):
        self.name, self.side, self.target = name, side, target
        self.state, self.reason, self.found = state, reason, found

    def __eq__(self, other: object) -> bool:
        return type(other) is Result and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return f"Result({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items())})"

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


class Gated:
    """What every kind shares: deciding on the gates.  Each kind is a `NamedTuple` (frozen,
    and cheap to define: `dataclasses` alone cost `apply()` ~25 ms) whose own
    fields come first and the gates (`GATES`, declared on `Patch`) last."""

    __slots__ = ()

    @property
    def qualified_target(self) -> str:
        raise NotImplementedError

    def examine(self, module: ModuleType | None) -> Verdict:
        raise NotImplementedError

    def result(self, state: State, reason: str = "", found: str = "") -> Result:
        return Result(self.name, self.side, self.qualified_target, state, reason, found)

    def decide(self, module: ModuleType | None) -> Result:
        """Whether to apply this patch here (`State.APPLIED` means 'apply it'); nothing is
        changed."""
        result = self.result
        installed = versions.speculators_version()
        if not versions.in_range(installed, self.speculators):
            return result(
                State.NOT_NEEDED,
                f"written for speculators {self.speculators}; installed {installed}",
            )
        if self.platform is not None and (self.platform == "cpu") != versions.platform_is_cpu():
            where = "only on" if self.platform == "cpu" else "not on"
            return result(State.NOT_NEEDED, f"{where} vLLM's CPU platform")
        try:
            verdict = self.examine(module)
        except Exception as exc:  # a probe that cannot even look is drift too
            verdict = Verdict(Need.UNKNOWN, f"{type(exc).__name__}: {exc}", "probe failed")
        if verdict.need is Need.UNDECIDED:
            version = versions.vllm_version()
            inside = versions.in_range(version, self.vllm)
            verdict = Verdict(
                Need.NEEDED if inside else Need.NOT_NEEDED,
                verdict.found,
                f"vLLM {version} {'in' if inside else 'outside'} {self.vllm}"
                + (f" ({verdict.reason})" if verdict.reason else ""),
            )
        return result(_STATE_OF[verdict.need], verdict.reason, verdict.found)


class _PatchFields(NamedTuple):
    name: str
    side: Side
    module: str
    target: str
    summary: str
    probe: Callable[[ModuleType], Verdict]
    wrap: Callable[[Any], Any]
    # the gates (GATES: every kind ends with these)
    speculators: str = ""  # the stock lines the patch is written against
    vllm: str = ""  # decides only when the probe cannot (Need.UNDECIDED)
    platform: Literal["cpu", "gpu"] | None = None  # gpu: any platform but vLLM's CPU one
    default: bool = True  # applied by a plain apply(); False: only when named in `only`
    #: names called by the stock module whose signature drift this patch repairs; the
    #: generic drift check (spec_compat.engine.drift) counts those calls as supported
    fixes: tuple[str, ...] = ()
    #: patches that must be selected with this one (they may act in another process, as
    #: the driver and worker halves of the transport do); without them it is skipped
    requires: tuple[str, ...] = ()
    #: patches on the same target that this one wraps: applied before it, so it stands
    #: outside them and sees what they return (spec_compat.engine.stacks orders each stack)
    after: tuple[str, ...] = ()
    #: patches on the same target that wrap this one (applied after it)
    before: tuple[str, ...] = ()
    #: patches of the same stock module whose effect makes this one moot: when one of them
    #: applies, this one is not applied and reports `State.SUPERSEDED`
    superseded_by: tuple[str, ...] = ()


#: the gate fields every kind ends with (declared and documented on `Patch`)
GATES = _PatchFields._fields[_PatchFields._fields.index("speculators") :]


class Patch(_PatchFields, Gated):
    """Replace `module.target` (a dotted path inside the stock module) with `wrap(original)`;
    `probe(module)` inspects the installed code once the module is imported."""

    __slots__ = ()

    @property
    def qualified_target(self) -> str:
        return f"{self.module}.{self.target}"

    def examine(self, module: ModuleType | None) -> Verdict:
        return self.probe(module)


def declare(
    module_name: str,
    *,
    target: str,
    summary: str,
    side: Side = "driver",
    module: str = GENERATOR,
    **declared: Any,
) -> Patch:
    """A patch module's `PATCH`: named as its module, with that module's own `probe` and
    `wrap` (every patch module defines both), on the stock extractor's module in the driver
    unless `module=` / `side=` say otherwise; `declared`: the rest of `Patch`'s fields."""
    own = sys.modules[module_name]
    name = module_name.rpartition(".")[2]
    return Patch(name, side, module, target, summary, own.probe, own.wrap, **declared)


class _ImportPatchFields(NamedTuple):
    name: str
    module: str
    old_module: str
    new_module: str
    names: tuple[str, ...]
    summary: str
    side: Side = "driver"
    # the gates, as on Patch (a unit test holds the two lists equal)
    speculators: str = ""
    vllm: str = ""
    platform: Literal["cpu", "gpu"] | None = None
    default: bool = True
    fixes: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()


class ImportPatch(_ImportPatchFields, Gated):
    """Redirect `from old_module import names` in the stock module to `new_module`."""

    __slots__ = ()

    @property
    def qualified_target(self) -> str:
        return f"{self.module}: from {self.old_module} import ..."

    def examine(self, module: ModuleType | None = None) -> Verdict:
        """Needed only when the old module lacks the names and the new one has them all."""
        old = importlib.import_module(self.old_module)
        missing = [n for n in self.names if not hasattr(old, n)]
        found = f"{self.old_module} lacks {missing or 'nothing'}"
        if not missing:
            return Verdict(Need.NOT_NEEDED, found)
        try:
            new = importlib.import_module(self.new_module)
        except ImportError:
            return Verdict(Need.UNKNOWN, found + f"; no {self.new_module}", "names vanished")
        absent = [n for n in missing if not hasattr(new, n)]
        if absent:
            return Verdict(Need.UNKNOWN, found + f"; {self.new_module} lacks {absent}")
        return Verdict(Need.NEEDED, found + f"; {self.new_module} has them", "helpers moved")
