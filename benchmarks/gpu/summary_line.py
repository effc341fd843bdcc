"""Join the dense and MoE calls' `h200.json` files into one summary line:

    python benchmarks/gpu/summary_line.py DENSE/h200.json MOE/h200.json
    H200 summary: dense B/A=X MoE B/A=Y B(files)/N(files)=Z

(medians of each call's passes; B(files)/N(files) from whichever call measured both).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(paths: list[str]) -> str:
    summaries = [json.loads(Path(path).read_text()) for path in paths]
    parts = [s["summary_part"] for s in summaries if "summary_part" in s]
    parts += [s["files_part"] for s in summaries if "files_part" in s][:1]
    return "H200 summary: " + " ".join(parts)


if __name__ == "__main__":
    print(main(sys.argv[1:]))
