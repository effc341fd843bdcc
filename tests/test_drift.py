"""The generic drift check on synthetic drift: a vendor API whose keywords were renamed."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
import wrapt

from spec_compat.engine import versions
from spec_compat.engine.drift import check, scan
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.registry import (
    ImportPatch,
    Patch,
    Registry,
    Result,
    State,
    UnsupportedDrift,
)

VENDOR = """
def make(a, b):
    return (a, b)

class Engine:
    def __init__(self, size=1):
        self.size = size

    def run(self, x, *, fast=False):
        return x
"""

STOCK = """
from {vendor}.api import Engine, make


def build():
    engine = Engine(size=2)
    engine.run(y=1)
    return make(a=1, c=2)


def fine():
    return make(1, b=2)
"""


@pytest.fixture
def drifted(tmp_path, monkeypatch):
    vendor = f"fakevendor_{os.urandom(3).hex()}"
    (tmp_path / vendor).mkdir()
    (tmp_path / vendor / "__init__.py").write_text("")
    (tmp_path / vendor / "api.py").write_text(VENDOR)
    stock = f"fakestock_{os.urandom(3).hex()}"
    (tmp_path / f"{stock}.py").write_text(textwrap.dedent(STOCK.format(vendor=vendor)))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield vendor, stock
    for name in [m for m in sys.modules if m.startswith((vendor, stock))]:
        sys.modules.pop(name)


def test_scan_flags_renamed_keywords_with_line_and_signature(drifted):
    vendor, stock = drifted
    points = {(p.line, p.call): p for p in scan(stock, roots=(vendor,))}
    assert points[(6, "Engine")].binds is True
    run = points[(7, "engine.run")]
    assert run.binds is False and "'x'" in run.error  # x was renamed y
    assert run.signature == "Engine.run(self, x, *, fast=False)"
    make = points[(8, "make")]
    assert make.binds is False and "'b'" in make.error  # b was renamed c
    assert make.target == f"{vendor}.api:make"
    assert points[(12, "make")].binds is True


def test_a_vanished_name_is_reported_missing(drifted):
    vendor, stock = drifted
    api = sys.modules.get(f"{vendor}.api") or __import__(f"{vendor}.api", fromlist=["make"])
    del api.make
    missing = [p for p in scan(stock, roots=(vendor,)) if p.call == "make"]
    assert missing and all(not p.present and p.drift for p in missing)


def test_only_a_patch_that_declares_the_fix_covers_the_call(drifted):
    vendor, stock = drifted
    fixer = Patch(
        "fix_make", "driver", stock, "make", "", lambda m: None, lambda o: o, fixes=("make",)
    )
    other = Patch("other", "driver", stock, "build", "", lambda m: None, lambda o: o)
    points = {p.call: p for p in check(stock, [fixer, other], roots=(vendor,)) if p.drift}
    assert points["make"].covered_by == ["fix_make"]
    assert points["engine.run"].covered_by == []


def test_apply_refuses_uncovered_drift_unless_not_strict(drifted, monkeypatch):
    vendor, stock = drifted
    monkeypatch.setattr(versions, "speculators_version", lambda: None)

    def preflight(module, applied):
        patches = [registry.patches[n] for n in applied]
        return [
            Result(f"drift:{p.line}", "driver", p.call, State.UNSUPPORTED, p.error, p.signature)
            for p in check(module.__name__, patches, (vendor,))
            if p.drift and not p.covered_by
        ]

    registry = Registry(preflight=preflight)
    registry.register(
        Patch(
            "fix_make",
            "driver",
            stock,
            "make",
            "",
            lambda m: Verdict(Need.NEEDED, "make"),
            lambda original: original,
            fixes=("make",),
        )
    )
    with pytest.raises(UnsupportedDrift) as info:
        registry.apply()
        __import__(stock)
    assert "engine.run" in str(info.value) and "'x'" in str(info.value)
    assert "strict=False" in str(info.value)
    registry.revert()
    sys.modules.pop(stock, None)
    registry.apply(strict=False)
    __import__(stock)
    assert [f.target for f in registry.findings] == ["engine.run"]


def test_import_patch_redirects_a_moved_name(tmp_path, monkeypatch):
    vendor = f"movedvendor_{os.urandom(3).hex()}"
    (tmp_path / vendor).mkdir()
    (tmp_path / vendor / "__init__.py").write_text("")
    (tmp_path / vendor / "old.py").write_text("def kept():\n    return 'kept'\n")
    (tmp_path / vendor / "new.py").write_text("def moved():\n    return 'moved'\n")
    stock = f"movedstock_{os.urandom(3).hex()}"
    (tmp_path / f"{stock}.py").write_text(f"from {vendor}.old import kept, moved\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(versions, "speculators_version", lambda: None)
    patch = ImportPatch("moved_test", stock, f"{vendor}.old", f"{vendor}.new", ("moved",), "")
    registry, hooked = Registry(), []
    registry.register(patch)
    # a post-import hook registered before the gate (another wrapt user, or a launcher):
    # wrapt's finder then sits behind the gate in sys.meta_path, and must still fire
    wrapt.register_post_import_hook(hooked.append, stock)
    registry.apply()
    try:
        module = __import__(stock)
        assert hooked == [module]
        assert module.moved() == "moved" and module.kept() == "kept"
        decisions = registry.status()
        assert [d.state for d in decisions] == [State.APPLIED]
        assert "lacks ['moved']" in decisions[0].found
        assert not hasattr(sys.modules[f"{vendor}.old"], "moved")  # the vendor is untouched
    finally:
        registry.revert()
        for name in [m for m in sys.modules if m.startswith((vendor, stock))]:
            sys.modules.pop(name)


def test_a_stock_module_the_gate_leaves_alone_still_fires_earlier_hooks(tmp_path, monkeypatch):
    """The gate returns no spec of its own unless it rewrites: wrapt's finder, wherever it
    sits, loads the module and fires the post-import hooks (every registry patch)."""
    vendor = f"keptvendor_{os.urandom(3).hex()}"
    (tmp_path / f"{vendor}.py").write_text("def kept():\n    return 'kept'\n")
    stock = f"keptstock_{os.urandom(3).hex()}"
    (tmp_path / f"{stock}.py").write_text(f"from {vendor} import kept\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(versions, "speculators_version", lambda: None)
    patch = ImportPatch("kept_test", stock, vendor, f"{vendor}_new", ("kept",), "")
    registry, hooked = Registry(), []
    registry.register(patch)
    wrapt.register_post_import_hook(hooked.append, stock)
    registry.apply()
    try:
        assert hooked == [__import__(stock)]
    finally:
        registry.revert()
        for name in [m for m in sys.modules if m.startswith((vendor, stock))]:
            sys.modules.pop(name)
