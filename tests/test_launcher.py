"""`spec-compat run`: exit codes, arguments and exceptions pass through (no vLLM needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from spec_compat.engine.registry import ENV_PATCHES

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    print(json.dumps({"argv": sys.argv[1:], "name": __name__,
                      "patches": os.environ.get("SPEC_COMPAT_PATCHES", "")}))
    if "--fail" in sys.argv:
        raise KeyError("from the user script")
    sys.exit(int(sys.argv[1]) if sys.argv[1:] and sys.argv[1].isdigit() else 0)
    """
)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != ENV_PATCHES}
    return subprocess.run(
        [sys.executable, "-m", "spec_compat", "run", *args],
        capture_output=True,
        text=True,
        env=base | (env or {}),
    )


def test_script_runs_as_main_with_its_arguments_and_exit_code(tmp_path):
    import json

    script = tmp_path / "user.py"
    script.write_text(SCRIPT)
    proc = _run(str(script), "3", "--flag", "value")
    assert proc.returncode == 3, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["argv"] == ["3", "--flag", "value"]
    assert seen["name"] == "__main__"
    assert "v030_collective_rpc_reply" in seen["patches"].split(",")


def test_exceptions_pass_through_with_the_script_frame(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(SCRIPT)
    proc = _run(str(script), "--fail")
    assert proc.returncode == 1
    assert "KeyError: 'from the user script'" in proc.stderr
    assert str(script) in proc.stderr


def test_module_mode_and_selection_by_flag_and_environment(tmp_path):
    import json

    (tmp_path / "usermod.py").write_text(SCRIPT)
    env = {"PYTHONPATH": str(tmp_path)}
    proc = _run("--only", "v030_capture_guard,request_eos_token_id", "-m", "usermod", env=env)
    assert proc.returncode == 0, proc.stderr
    chosen = set(json.loads(proc.stdout)["patches"].split(","))
    assert chosen == {"v030_capture_guard", "request_eos_token_id"}
    proc = _run("-m", "usermod", env=env | {"SPEC_COMPAT_EXCLUDE": "v030_capture_guard"})
    patches = json.loads(proc.stdout)["patches"].split(",")
    assert "v030_capture_guard" not in patches and "request_eos_token_id" in patches


def test_unknown_patch_name_is_a_clear_error(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(SCRIPT)
    proc = _run("--exclude", "no_such_patch", str(script))
    assert proc.returncode != 0
    assert "unknown patch name" in proc.stderr
