"""Refusals for pairs no patch can bridge, checked just before a stock module is imported.

A stock module that cannot even import on the installed vLLM (a name it imports does not
exist there) would fail with a bare ImportError from speculators' own code.  A pre-import
check turns that into `UnsupportedDrift` with the reason, raised by the import statement
that would have failed.  Each `Requirement` is data: which stock module, which speculators
lines, and a probe of the installed vLLM that returns the refusal reason (None: fine).
"""

from __future__ import annotations

import importlib.abc
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


class PreImportGate(importlib.abc.MetaPathFinder):
    """Checks a stock module's requirements when it is about to be imported."""

    def __init__(self) -> None:
        self.enabled = False

    def find_spec(self, fullname, path=None, target=None):
        if self.enabled and any(req.module == fullname for req in REQUIREMENTS):
            found = refusals(fullname)
            if found:
                raise UnsupportedDrift(found)
        return None  # the normal finders load it


GATE = PreImportGate()


def install() -> None:
    GATE.enabled = True
    if GATE not in sys.meta_path:
        sys.meta_path.insert(0, GATE)


def uninstall() -> None:
    GATE.enabled = False
