"""`apply()` stays cheap: it loads the declarations, and what a patch needs to act loads
with the patch (benchmarks/apply_time.py measures the time; this checks what is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from spec_compat.names import ENV_PATCHES

#: modules that only deciding or applying a patch needs (each cost apply() milliseconds)
LATER = ("wrapt", "spec_compat.transport", "spec_compat.capture", "logging", "importlib.abc")


def test_apply_imports_what_patches_need_only_when_they_are_decided():
    code = textwrap.dedent(
        f"""
        import sys
        import spec_compat
        spec_compat.apply()
        print(sorted(m for m in {LATER!r} if m in sys.modules))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_PATCHES}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
