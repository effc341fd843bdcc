"""The selection in the environment: what `apply()` hands every child process, and the
`--only` / `--exclude` a user sets for `spec-compat run`, doctor and rehearsals.

The start-up hook (`spec_compat.startup`) reads `requested()` in a child before anything
else runs there.
"""

from __future__ import annotations

import os

from spec_compat.engine.names import ENV_EXCLUDE, ENV_ONLY, ENV_PATCHES, ENV_STRICT


def export(names: list[str], strict: bool) -> None:
    """Hand a selection to every process started from now on."""
    os.environ[ENV_PATCHES] = ",".join(names)
    os.environ[ENV_STRICT] = "1" if strict else "0"


def clear() -> None:
    os.environ.pop(ENV_PATCHES, None)
    os.environ.pop(ENV_STRICT, None)


def requested() -> tuple[list[str], bool]:
    """The patch names and strictness a parent exported (no names: nothing to apply)."""
    names = [n for n in os.environ.get(ENV_PATCHES, "").split(",") if n]
    return names, os.environ.get(ENV_STRICT) != "0"


def names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [n.strip() for n in value.split(",") if n.strip()]


def from_user(only: str | None = None, exclude: str | None = None) -> dict[str, list | None]:
    """`apply()`'s `only`/`exclude` from these values, else from the environment (what
    `spec-compat run`, `doctor` and rehearsals all apply)."""
    return {
        "only": names(only if only is not None else os.environ.get(ENV_ONLY)),
        "exclude": names(exclude if exclude is not None else os.environ.get(ENV_EXCLUDE)),
    }
