"""The native-vLLM reference: vLLM's own EAGLE-3 aux-hidden-state outputs, no speculators.

    python run_native.py SPEC.json

SPEC: {"model": dir, "prompts": [[ids]...], "layers": [..], "max_model_len": int,
       "attention_backend": str|null, "model_options": {...}, "out": file.pt}

Used where transformers cannot be the oracle (vLLM's CPU MLA kernels differ from
transformers' DeepSeek-V2, see docs/models.md).  The same reference `rehearse` uses
(`spec_compat.rehearse.child`, mode "native"): each prompt alone, speculators' ids + 1 asked of
vLLM's own aux hidden states.  Writes [[state per layer] per prompt].
"""

from __future__ import annotations

import sys

from spec_compat.rehearse.child import main

if __name__ == "__main__":
    main(["native", sys.argv[1]])
