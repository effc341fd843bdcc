from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

REQUIRE_E2E = os.environ.get("SPEC_COMPAT_REQUIRE_E2E") == "1"
#: "full" (default) runs every E2E test; "core" skips the `exhaustive` ones (per-patch
#: exclusion proofs, families, launcher, leak tests), which CI runs on one release only;
#: "release" (CI's older releases) also skips the `one_release` ones, whose release-specific
#: part other tests prove on every release.
E2E_SCOPE = os.environ.get("SPEC_COMPAT_E2E_SCOPE", "full")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (`-n 2`, what nox runs) every test of one speculators line goes to
    one worker: its session fixtures (the extractor battery, the tiny model) are built once
    while the other line runs on the other worker.  Most of an E2E test's time is a
    single-threaded import of torch and vLLM in a fresh process, so two lines on two cores
    take little more than one.  (xdist's own `loadgroup` ignores groups under pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    from e2e.harness import speculators_dirs

    lines = set(speculators_dirs())

    class OneWorkerPerLine(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            ids = nodeid.rpartition("[")[2].rstrip("]").split("-") if nodeid.endswith("]") else []
            line = next((i for i in ids if i in lines), None)
            return f"speculators-{line}" if line else nodeid

    return OneWorkerPerLine(config, log)


def pytest_collection_modifyitems(config, items):
    """E2E tests need vllm and a speculators line; CI sets SPEC_COMPAT_REQUIRE_E2E=1 so a
    missing stack fails instead of skipping."""
    from e2e.harness import speculators_dirs

    if E2E_SCOPE in ("core", "release"):
        for item in items:
            if "exhaustive" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="exhaustive: runs in the full scope"))
            elif E2E_SCOPE == "release" and "one_release" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="one_release: CI's newest release runs it"))

    missing = []
    if importlib.util.find_spec("vllm") is None:
        missing.append("vllm is not installed in this environment")
    if not speculators_dirs():
        missing.append("no speculators line found (.venvs/speculators-*; tools/make_env.py)")
    if not missing:
        return
    if REQUIRE_E2E and any("e2e" in item.keywords for item in items):
        raise pytest.UsageError("E2E stack required but " + "; ".join(missing))
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="; ".join(missing)))


@pytest.fixture
def stock_module(tmp_path, monkeypatch):
    """Makes fresh importable modules standing in for a speculators module (not imported
    yet): `stock_module(source)` returns the new module's name.  speculators counts as 0.3.0
    and no parent's patch selection is inherited."""
    from packaging.version import Version

    from spec_compat.engine import versions
    from spec_compat.engine.names import ENV_PATCHES

    made: list[str] = []

    def make(source: str) -> str:
        name = f"fake_stock_{os.urandom(4).hex()}"
        (tmp_path / f"{name}.py").write_text(source)
        made.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(versions, "speculators_version", lambda: Version("0.3.0"))
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    yield make
    for name in made:
        sys.modules.pop(name, None)
