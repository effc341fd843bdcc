"""`apply()` stays cheap: it loads the declarations, and what a patch needs to act loads
with the patch (benchmarks/apply_time.py measures the time; this checks what is imported),
while every patch still lands when its stock module is imported."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from spec_compat.engine import versions
from spec_compat.engine.listing import Listing
from spec_compat.engine.names import ENV_PATCHES
from spec_compat.engine.patch import Patch, State
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.registry import Registry

#: modules that only deciding or applying a patch needs (each cost apply() milliseconds)
LATER = (
    "wrapt",
    "spec_compat.transport",
    "spec_compat.models.support",
    "logging",
    "importlib.abc",
    "dataclasses",
    "inspect",
)


def test_apply_imports_what_patches_need_only_when_they_are_decided():
    code = textwrap.dedent(
        f"""
        import sys
        import spec_compat
        spec_compat.apply()
        print(sorted(m for m in {LATER!r} if m in sys.modules))
        print(sorted(m for m in sys.modules if m.startswith("spec_compat.patches.")))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_PATCHES}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    later, patch_modules = out.stdout.strip().splitlines()
    assert later == "[]"
    assert patch_modules == "['spec_compat.patches._listing']"  # no patch module yet


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A stock package, not imported yet, whose module `stock` a patch replaces."""
    name = f"fake_pkg_{os.urandom(4).hex()}"
    (tmp_path / name).mkdir()
    (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / name / "stock.py").write_text("def run():\n    return 'stock'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(versions, "speculators_version", lambda: Version("0.3.0"))
    monkeypatch.delenv(ENV_PATCHES, raising=False)
    registry = Registry()
    registry.register(
        Patch(
            "patched_run",
            "driver",
            f"{name}.stock",
            "run",
            "test",
            lambda m: Verdict(Need.NEEDED, "run()"),
            lambda original: lambda: "patched",
        )
    )
    yield name, registry
    registry.revert()
    for module in [m for m in sys.modules if m.split(".")[0] == name]:
        sys.modules.pop(module)


def test_a_patch_lands_when_its_package_is_imported_after_apply(package):
    name, registry = package
    registry.apply()
    assert registry._deferred == {name: [f"{name}.stock"]}  # no hook (and no wrapt) yet
    assert importlib.import_module(f"{name}.stock").run() == "patched"


def test_a_patch_lands_when_its_package_was_imported_past_the_hook(package, monkeypatch):
    import wrapt.importer

    name, registry = package
    # as in a process where nothing registered a wrapt hook yet: no wrapt finder
    monkeypatch.setattr(
        sys, "meta_path", [f for f in sys.meta_path if f.__module__ != "wrapt.importer"]
    )
    monkeypatch.setattr(wrapt.importer, "_post_import_hooks_init", False)
    registry.apply()
    # the package loads without this registry's finder being asked (another finder, or a
    # loader run by hand); the stock module itself is the first name the finder sees
    spec = importlib.util.spec_from_file_location(
        name, Path(sys.path[0]) / name / "__init__.py", submodule_search_locations=[]
    )
    spec.submodule_search_locations = [str(Path(sys.path[0]) / name)]
    sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules[name])
    assert importlib.import_module(f"{name}.stock").run() == "patched"


@pytest.fixture
def listed(package, tmp_path):
    """`package`'s patch known by its listing only: its declaration loads on first use."""
    name, declared = package
    for other in ("json", "elsewhere"):
        (tmp_path / name / f"{other}.py").write_text("")
    patch = declared.patches["patched_run"]
    loads = []

    def load():
        loads.append(name)
        return [patch]

    registry = Registry(listing=(Listing.of(patch),), load=load)
    yield name, registry, patch, loads
    registry.revert()


def test_a_listed_patch_loads_when_its_module_is_imported_and_then_lands(listed):
    name, registry, _, loads = listed
    (result,) = registry.apply()
    assert (result.name, result.state, loads) == ("patched_run", State.PENDING, [])
    importlib.import_module(f"{name}.json")  # another module of the package: still listed
    assert loads == []
    assert importlib.import_module(f"{name}.stock").run() == "patched"
    assert loads == [name]
    assert registry.results["patched_run"].state is State.APPLIED


def test_a_listing_its_declaration_contradicts_is_refused(listed):
    name, _, patch, _ = listed
    stale = Listing.of(patch)._replace(module=f"{name}.elsewhere")
    registry = Registry(listing=(stale,), load=lambda: [patch])
    registry.apply()
    with pytest.raises(RuntimeError, match=r"tools/patches_doc\.py") as refused:
        importlib.import_module(f"{name}.elsewhere")
    assert f"{name}.stock" in str(refused.value) and f"{name}.elsewhere" in str(refused.value)
    registry.revert()


def test_the_listing_is_in_application_order():
    """Selection reads the listing before the declarations load and them after: the same
    order either way (status() and doctor list the patches in it)."""
    from spec_compat import REGISTRY
    from spec_compat.patches import LISTING

    assert [e.name for e in LISTING] == [p.name for p in REGISTRY.ordered()]
