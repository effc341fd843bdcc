"""Requirements: stock-line / vLLM pairs that no patch can bridge, refused with the reason.

A stock module that cannot even import on the installed vLLM would fail with a bare
ImportError from speculators' own code; the registry's import hook raises
`UnsupportedDrift` with the reason instead, and doctor reports it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import NamedTuple

from spec_compat.engine import versions
from spec_compat.engine.names import GENERATOR
from spec_compat.engine.patch import Result, State


class Requirement(NamedTuple):
    name: str
    module: str
    speculators: str
    check: Callable[[], str | None]  # why the pair cannot work, or None

    def refusal(self) -> Result | None:
        if not versions.in_range(versions.speculators_version(), self.speculators):
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
            f"vLLM {versions.vllm_version()}, speculators {versions.speculators_version()}",
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


REQUIREMENTS = (Requirement("v04_needs_vllm_utils_hashing", GENERATOR, ">=0.4,<0.5", _v04_hashing),)
