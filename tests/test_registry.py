"""Fast unit tests of the registry, on a synthetic 'stock' module (no vLLM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from spec_compat.engine import stock_source, versions
from spec_compat.engine.probes import Need, Verdict, binding_probe, missing_and_unexpected
from spec_compat.engine.registry import ENV_PATCHES, Patch, Registry, State, UnsupportedDrift

STOCK_SOURCE = """
def vendor_make(a, b, required):
    return (a, b, required)

class Engine:
    def run(self):
        return "stock"

def build():
    return vendor_make(a=1, b=2)
"""


@pytest.fixture
def stock(stock_module):
    """A fresh importable module standing in for a speculators module, not yet imported."""
    return stock_module(STOCK_SOURCE)


def _make_fix(original):
    def vendor_make(*args, **kwargs):
        kwargs.setdefault("required", "filled")
        return original(*args, **kwargs)

    vendor_make.__wrapped__ = original
    return vendor_make


def _binding(module):
    def fixable(call, params):
        missing, unexpected = missing_and_unexpected(call, params)
        return not unexpected and missing <= {"required"}

    return binding_probe(module, "vendor_make", module.vendor_make, fixable)


def make_registry(module_name: str, **overrides) -> Registry:
    registry = Registry()
    registry.register(
        Patch(
            name="fill_required",
            side="driver",
            module=module_name,
            target="vendor_make",
            summary="test",
            probe=overrides.get("probe", _binding),
            wrap=_make_fix,
            speculators=overrides.get("speculators", ""),
        )
    )
    registry.register(
        Patch(
            name="engine_run",
            side="worker",
            module=module_name,
            target="Engine.run",
            summary="test",
            probe=lambda m: Verdict(Need.NEEDED, "Engine.run()"),
            wrap=lambda original: lambda self: "patched:" + original(self),
        )
    )
    return registry


def test_binding_probe_needed_and_apply_fixes_the_call(stock):
    registry = make_registry(stock)
    module = __import__(stock)
    assert _binding(module).need is Need.NEEDED
    with pytest.raises(TypeError):
        module.build()
    registry.apply()
    assert module.build() == (1, 2, "filled")
    assert module.Engine().run() == "patched:stock"
    assert {r.name: r.state for r in registry.status()} == {
        "fill_required": State.APPLIED,
        "engine_run": State.APPLIED,
    }


def test_patches_land_when_the_module_is_imported_later(stock):
    registry = make_registry(stock)
    registry.apply()
    assert stock not in sys.modules
    assert {r.state for r in registry.status()} == {State.PENDING}
    module = __import__(stock)
    assert module.build() == (1, 2, "filled")
    assert registry.results["fill_required"].state is State.APPLIED


def test_apply_is_idempotent_and_revert_restores_exact_objects(stock):
    module = __import__(stock)
    original_make, original_run = module.vendor_make, module.Engine.__dict__["run"]
    registry = make_registry(stock)
    registry.apply()
    patched = module.vendor_make
    registry.apply()
    assert module.vendor_make is patched  # not wrapped twice
    assert module.Engine().run() == "patched:stock"
    registry.revert()
    assert module.vendor_make is original_make
    assert module.Engine.__dict__["run"] is original_run
    assert registry.status() == []
    assert ENV_PATCHES not in os.environ


def test_unknown_shape_raises_naming_patch_target_and_signature(stock):
    module = __import__(stock)

    def probe(m):
        return Verdict(Need.UNKNOWN, "vendor_make(x, y)", "keyword 'a' is gone")

    registry = make_registry(stock, probe=probe)
    original = module.vendor_make
    with pytest.raises(UnsupportedDrift) as info:
        registry.apply()
    message = str(info.value)
    assert "fill_required" in message
    assert f"{stock}.vendor_make" in message
    assert "vendor_make(x, y)" in message
    assert "doctor" in message
    assert module.vendor_make is original  # nothing in that module was patched
    assert module.Engine.run(module.Engine()) == "stock"
    assert registry.results["fill_required"].state is State.UNSUPPORTED


def test_a_bind_failure_no_patch_knows_is_unknown(stock):
    source = Path(sys.modules.get(stock, __import__(stock)).__file__)
    source.write_text(STOCK_SOURCE.replace("vendor_make(a=1, b=2)", "vendor_make(a=1, c=2)"))
    sys.modules.pop(stock)
    module = __import__(stock)
    stock_source.tree.cache_clear()
    verdict = _binding(module)
    assert verdict.need is Need.UNKNOWN
    assert "line 10" in verdict.reason and "'b'" in verdict.reason
    assert verdict.found.startswith("vendor_make(a, b, required)")


def test_speculators_range_gates_before_probe(stock):
    registry = make_registry(stock, speculators=">=0.4")
    registry.apply(only=["fill_required"])
    __import__(stock)
    result = registry.results["fill_required"]
    assert result.state is State.NOT_NEEDED
    assert "0.3.0" in result.reason


def test_only_exclude_and_side(stock):
    registry = make_registry(stock)
    assert [p.name for p in registry.select(only=["engine_run"])] == ["engine_run"]
    assert [p.name for p in registry.select(exclude=["engine_run"])] == ["fill_required"]
    assert [p.name for p in registry.select(side="worker")] == ["engine_run"]
    with pytest.raises(ValueError, match="unknown patch name"):
        registry.select(only=["nope"])
    registry.apply(exclude=["engine_run"])
    assert os.environ[ENV_PATCHES] == "fill_required"
    registry.revert()


def test_undecided_probe_uses_the_vllm_range(stock, monkeypatch):
    module = __import__(stock)
    registry = Registry()
    registry.register(
        Patch(
            name="ranged",
            side="driver",
            module=stock,
            target="vendor_make",
            summary="test",
            probe=lambda m: Verdict(Need.UNDECIDED, "shape hidden"),
            wrap=_make_fix,
            vllm=">=0.11.1",
        )
    )
    monkeypatch.setattr(versions, "vllm_version", lambda: Version("0.16.1.dev42+gabc"))
    registry.apply()
    assert registry.results["ranged"].state is State.APPLIED  # nightlies are in range
    registry.revert()
    monkeypatch.setattr(versions, "vllm_version", lambda: Version("0.11.0"))
    registry.apply()
    assert registry.results["ranged"].state is State.NOT_NEEDED
    assert module.vendor_make.__name__ == "vendor_make"


def test_in_range_accepts_nightlies():
    assert versions.in_range(Version("0.16.1.dev42+g1234"), ">0.16.0")
    assert not versions.in_range(Version("0.16.1.dev42+g1234"), ">=0.16.1")  # dev precedes release
    assert versions.in_range(Version("0.16.0+cpu"), ">=0.12,<=0.16.0")
    assert not versions.in_range(None, ">=0.1")
    assert versions.in_range(None, "")


def test_every_declared_patch_documents_itself():
    import importlib

    from spec_compat import REGISTRY

    for patch in REGISTRY.patches.values():
        module = importlib.import_module(f"spec_compat.patches.{patch.name}")
        doc = module.__doc__ or ""
        for heading in ("Target:", "Why:", "How:", "Upstream change:", "Remove when:"):
            assert heading in doc, f"{patch.name} lacks {heading}"


def test_import_and_apply_import_neither_torch_nor_vllm():
    code = textwrap.dedent(
        """
        import sys
        import spec_compat
        spec_compat.apply()
        roots = ('torch', 'vllm', 'transformers', 'speculators')
        heavy = sorted(m for m in sys.modules if m.split('.')[0] in roots)
        print(heavy)
        assert not heavy, heavy
        """
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_PATCHES}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_pre_import_gate_refuses_with_the_reason(tmp_path, monkeypatch):
    from spec_compat.engine.requirements import Requirement

    name = f"fake_gated_{os.urandom(3).hex()}"
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    requirement = Requirement("needs_x", name, ">=0.4", lambda: "x is missing")
    registry = Registry(requirements=(requirement,))
    monkeypatch.setattr(versions, "speculators_version", lambda: Version("0.4.0.1"))
    registry.apply()
    try:
        with pytest.raises(UnsupportedDrift, match="x is missing"):
            __import__(name)
        monkeypatch.setattr(versions, "speculators_version", lambda: Version("0.3.0"))
        assert __import__(name).VALUE == 1  # the requirement is for 0.4.x only
    finally:
        registry.revert()
        sys.modules.pop(name, None)


def test_the_stock_source_reader_finds_calls_and_mentions(stock):
    stock_source.tree.cache_clear()
    calls = stock_source.stock_calls(stock, "vendor_make")
    assert [(c.line, c.n_positional, set(c.keywords)) for c in calls] == [(10, 0, {"a", "b"})]
    assert stock_source.stock_passes(stock, "vendor_make", "a")
    assert not stock_source.stock_passes(stock, "vendor_make", "required")
    assert stock_source.stock_mentions(stock, "vendor_make")
    assert not stock_source.stock_mentions(stock, "engine.run")


def test_a_patch_whose_partner_is_not_selected_is_skipped(stock):
    registry = make_registry(stock)
    registry.register(
        Patch(
            "needs_engine_run",
            "driver",
            stock,
            "build",
            "test",
            lambda m: Verdict(Need.NEEDED, "build()"),
            lambda original: lambda: "partnered",
            requires=("engine_run",),
        )
    )
    registry.apply(exclude=["engine_run"])
    module = __import__(stock)
    result = registry.results["needs_engine_run"]
    assert result.state is State.SKIPPED and "engine_run" in result.reason
    assert module.build() == (1, 2, "filled")  # not replaced
    registry.revert()
    registry.apply()
    assert module.build() == "partnered"
    registry.revert()


def test_every_replacement_is_stamped_by_the_registry(stock):
    module = __import__(stock)
    original = module.Engine.__dict__["run"]
    registry = make_registry(stock)
    registry.apply()
    replaced = module.Engine.__dict__["run"]
    assert replaced is not original
    assert (replaced.__name__, replaced.__qualname__) == ("run", "Engine.run")
    assert replaced.__module__ == stock
    assert replaced.__wrapped__ is original
    assert replaced.spec_compat_patch == "engine_run"
    registry.revert()


def test_stamp_leaves_proxies_and_classes_usable():
    import wrapt

    from spec_compat.engine.replacements import stamp

    class Original:
        """the original"""

    class Adapter(Original):
        pass

    assert stamp(Adapter, Original, "p") is Adapter
    assert (Adapter.__qualname__, Adapter.__doc__) == (Original.__qualname__, "the original")
    assert issubclass(Adapter, Original) and Adapter.spec_compat_patch == "p"
    proxy = wrapt.ObjectProxy(Original)
    assert stamp(proxy, Original, "p") is proxy
    assert not hasattr(Original, "spec_compat_patch")  # a proxy forwards: nothing was set


def test_the_patch_list_is_every_patch_module_once_with_known_partners():
    import pkgutil

    from spec_compat import REGISTRY, patches

    modules = {m.name for m in pkgutil.iter_modules(patches.__path__) if m.name[0] != "_"}
    assert set(patches.ORDER) == modules and len(patches.ORDER) == len(modules)
    assert [p.name for p in patches.ALL] == list(patches.ORDER)  # a patch is named as its module
    for patch in REGISTRY.patches.values():
        assert set(patch.requires) <= set(REGISTRY.patches), patch.name


def test_an_import_patch_is_decided_like_any_other(monkeypatch):
    from spec_compat.engine.patch import ImportPatch

    patch = ImportPatch("moved", "stock", "os", "os.path", ("no_such_name",), "", speculators=">=9")
    monkeypatch.setattr(versions, "speculators_version", lambda: Version("0.3.0"))
    result = patch.decide(None)
    assert result.state is State.NOT_NEEDED and ">=9" in result.reason
    undecided = ImportPatch("moved", "stock", "os", "os.path", ("sep",), "", vllm="<0.1")
    monkeypatch.setattr(ImportPatch, "examine", lambda self, module: Verdict(Need.UNDECIDED, "?"))
    monkeypatch.setattr(versions, "vllm_version", lambda: Version("0.32.0"))
    assert undecided.decide(None).state is State.NOT_NEEDED  # the vLLM range decides


def test_the_worker_transport_answers_the_drivers_recycle_call():
    from spec_compat.engine.names import (
        GET_CAPTURED,
        RECYCLE_SEGMENTS,
        RESET_CAPTURE,
        STORE_CAPTURED,
        WORKER_TRANSPORT,
    )
    from spec_compat.patches import shm_transport_worker

    stock = type("HiddenStatesWorkerExtension", (), dict.fromkeys(
        (RESET_CAPTURE, STORE_CAPTURED, GET_CAPTURED), lambda self, *a: None
    ))  # fmt: skip
    patched = shm_transport_worker.wrap(stock)
    worker = patched()
    released = []
    transport = type("Transport", (), {"recycle": lambda self, names: released.append(names)})
    setattr(worker, WORKER_TRANSPORT, transport())
    # the driver's collective_rpc(RECYCLE_SEGMENTS, args=(free,)) calls it by that name
    assert getattr(worker, RECYCLE_SEGMENTS)(["seg-a", "seg-b"]) is None
    assert released == [["seg-a", "seg-b"]]
    # vLLM refuses an extension whose attributes collide with its worker's: ours are private
    assert all(n.startswith("_") for n in set(vars(patched)) - set(vars(stock)))


def test_a_former_patch_name_still_works_with_a_warning(monkeypatch):
    import spec_compat

    monkeypatch.delenv(ENV_PATCHES, raising=False)
    try:
        with pytest.warns(DeprecationWarning, match="worker_eagle3_capture") as caught:
            results = spec_compat.apply(only=["worker_native_layer_call"])
        assert caught[0].filename == __file__  # the warning points at the caller
        assert [r.name for r in results] == ["worker_eagle3_capture"]
    finally:
        spec_compat.revert()


def test_the_launched_script_reads_the_worker_checks_where_the_driver_writes_them():
    """tests/e2e/run_extractor.py spells the attribute out (a script run by `spec-compat run`
    never imports spec_compat): its literal must be the name the driver half writes."""
    import ast

    from spec_compat.engine import names

    script = Path(__file__).parent / "e2e" / "run_extractor.py"
    read = [
        node.args[1].value
        for node in ast.walk(ast.parse(script.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "getattr"
        and ast.unparse(node.args[0]) == "generator.executor"
        and isinstance(node.args[1], ast.Constant)
    ]
    assert read == [names.WORKER_CHECKS]


def test_the_stock_source_reader_knows_which_replies_are_ignored(tmp_path, monkeypatch):
    name = f"fake_loop_{os.urandom(3).hex()}"
    (tmp_path / f"{name}.py").write_text(
        "def loop(self):\n"
        "    self.ex.rpc('set', args=(1,))\n"
        "    out = self.ex.run(1)\n"
        "    self.ex.sample(out)\n"
        "    kept = self.ex.rpc('get')\n"
        "    passed = self.ex.step()\n"
        "    self.ex.sample(passed)\n"
        "    return kept, self.ex.keep(passed)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    ignores = stock_source.stock_ignores_result
    assert ignores(name, "self.ex.rpc", "set")
    assert ignores(name, "self.ex.run")  # only passed on to a call that is itself ignored
    assert ignores(name, "self.ex.sample")
    assert not ignores(name, "self.ex.rpc", "get")  # returned
    assert not ignores(name, "self.ex.rpc")  # one of its calls is read
    assert not ignores(name, "self.ex.step")  # also passed to a call that is read
    assert not ignores(name, "self.ex.absent")  # never called: nothing to rely on


def test_every_kind_of_patch_ends_with_the_same_gates():
    from spec_compat.engine.patch import GATES, ImportPatch

    for kind in (Patch, ImportPatch):
        assert kind._fields[-len(GATES) :] == GATES, kind
    gated_defaults = {k: Patch._field_defaults[k] for k in GATES}
    assert {k: ImportPatch._field_defaults[k] for k in GATES} == gated_defaults
