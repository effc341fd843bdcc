"""The start-up hook: a patched parent's selection, applied from a child's first line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from spec_compat import startup
from spec_compat.engine.names import ENV_PATCHES, ENV_STARTUP, ENV_STRICT

BASE = {k: v for k, v in os.environ.items() if not k.startswith("SPEC_COMPAT_")}


def _python(code: str, env: dict[str, str], cwd: str | None = None) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=BASE | env,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_hook_is_installed_in_this_interpreter():
    found = startup.hook_file()
    assert found is not None, "spec_compat_startup.pth missing: reinstall spec-compat"
    assert "SPEC_COMPAT_PATCHES" in found.read_text()


def test_inert_without_the_flag_and_imports_nothing():
    seen = _python("import json, sys; print(json.dumps('spec_compat' in sys.modules))", {})
    assert seen is False


def test_a_child_applies_the_parents_selection_before_its_first_line():
    code = """
        import json, sys
        from spec_compat import startup, status
        print(json.dumps([startup.ACTIVE, [r.name for r in status()]]))
    """
    env = {ENV_PATCHES: "v030_collective_rpc_reply,kv_cache_planning_module,no_such_refusal"}
    active, names = _python(code, env)
    assert active is True
    assert names == ["v030_collective_rpc_reply"]  # the import patch waits for its module
    active, names = _python(code, env | {ENV_STARTUP: "0"})
    assert (active, names) == (False, [])


def test_apply_exports_the_whole_selection_and_strictness(monkeypatch):
    import spec_compat

    monkeypatch.delenv(ENV_PATCHES, raising=False)
    try:
        spec_compat.apply(exclude=["v030_collective_rpc_reply"], strict=False)
        exported = os.environ[ENV_PATCHES].split(",")
        assert "v030_collective_rpc_reply" not in exported
        assert {"worker_eagle3_capture", "kv_cache_planning_module"} <= set(exported)
        assert os.environ[ENV_STRICT] == "0"
    finally:
        spec_compat.revert()
    assert ENV_PATCHES not in os.environ and ENV_STRICT not in os.environ


def test_a_spawned_child_has_the_patches_when_it_re_imports_main(tmp_path):
    """spawn re-imports the parent's __main__ in the child before anything else runs there:
    the module-level line below must already see the patches."""
    script = tmp_path / "user_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import json, multiprocessing, sys
            from spec_compat import startup
            AT_IMPORT = startup.ACTIVE  # False unless the hook ran before this line

            def report(queue):
                queue.put(AT_IMPORT)

            if __name__ == "__main__":
                import spec_compat
                spec_compat.apply()
                ctx = multiprocessing.get_context("spawn")
                queue = ctx.Queue()
                child = ctx.Process(target=report, args=(queue,))
                child.start()
                print(json.dumps(queue.get(timeout=60)))
                child.join()
            """
        )
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=BASE)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) is True


def test_a_failed_start_up_refuses_the_stock_modules(tmp_path, monkeypatch):
    from spec_compat import api
    from spec_compat.engine import names
    from spec_compat.patches import load

    load()  # declared before GENERATOR is faked: declarations read it as they import
    fake = f"fake_stock_{os.urandom(3).hex()}"
    (tmp_path / f"{fake}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(names, "GENERATOR", fake)
    monkeypatch.setattr(startup, "FAILED", None)

    def broken(**_: object) -> None:
        raise RuntimeError("drift seen only here")

    monkeypatch.setattr(api, "apply", broken)
    monkeypatch.setenv(ENV_PATCHES, "v030_collective_rpc_reply")
    startup.run()
    assert isinstance(startup.FAILED, RuntimeError)
    with pytest.raises(RuntimeError, match=r"start-up hook could not apply.*drift seen only here"):
        __import__(fake)
    assert startup.report()["error"] == "RuntimeError: drift seen only here"


def test_doctor_calls_a_missing_hook_an_environment_problem(monkeypatch):
    from spec_compat.cli import doctor

    monkeypatch.setattr(startup, "hook_file", lambda: None)
    versions = {"vllm": "0.32.0", "speculators": "0.4.0.1"}
    problems = doctor._environment_problems(versions)
    assert any(
        "spec_compat_startup.pth is not in this interpreter's site-packages" in p for p in problems
    )


def test_doctor_calls_compiled_ops_that_do_not_load_an_environment_problem(monkeypatch):
    """vLLM only logs a failed import of its compiled ops; doctor must not say OK then."""
    import importlib

    from vllm.platforms import current_platform

    from spec_compat.cli import doctor

    real_import = importlib.import_module

    def failing(name, *args):
        if name == "vllm._C":
            raise ImportError("version `GLIBC_2.38' not found")
        return real_import(name, *args)

    monkeypatch.setattr(doctor.importlib, "import_module", failing)
    versions = {"vllm": "0.32.0", "speculators": "0.4.0.1"}
    problems = doctor._environment_problems(versions)
    assert any("compiled ops (vllm._C) do not load" in p and "GLIBC_2.38" in p for p in problems)
    # with no device at all (a CUDA build on a CPU machine: doctor's signature check) no
    # engine would run those ops, and nothing is reported
    monkeypatch.setattr(type(current_platform), "is_unspecified", lambda self: True)
    assert doctor.compiled_ops_problem() is None
