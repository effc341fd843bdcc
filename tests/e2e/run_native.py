"""The native-vLLM reference: vLLM's own EAGLE-3 aux-hidden-state outputs, no speculators.

    python run_native.py SPEC.json

SPEC: {"model": dir, "prompts": [[ids]...], "layers": [..], "max_model_len": int,
       "attention_backend": str|null, "model_options": {...}, "out": file.pt}

Used where transformers cannot be the oracle (vLLM's CPU MLA kernels differ from
transformers' DeepSeek-V2, see docs/models.md).  The decoder's `aux_hidden_state_layers`
is set to speculators' ids + 1 (vLLM's id k is the state entering layer k; the id one past
the last layer is the state before the final norm), and each prompt runs alone, so every
forward's aux outputs belong to one prompt.  Writes [[state per layer] per prompt].
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine (and model) in this process


def main() -> None:
    import torch
    from vllm import LLM, SamplingParams

    spec = json.loads(Path(sys.argv[1]).read_text())
    options = {}
    if backend := spec.get("attention_backend"):
        from vllm.config import AttentionConfig

        options["attention_config"] = AttentionConfig(backend=backend)
    llm = LLM(
        spec["model"],
        dtype="float32",
        enforce_eager=True,
        max_model_len=spec["max_model_len"],
        enable_prefix_caching=False,
        **options,
        **spec.get("model_options", {}),
    )
    native_ids = tuple(k + 1 for k in spec["layers"])

    def install(model):
        """Aux states as vLLM's EAGLE-3 path asks for them: on the decoder where it holds
        `aux_hidden_state_layers`, else through the model's own `set_aux_hidden_state_layers`
        (vLLM's transformers backend records them in the model's forward)."""
        from spec_compat.patches.worker_eagle3_capture import find_decoder

        decoder = find_decoder(model)
        if decoder is not None and hasattr(decoder, "aux_hidden_state_layers"):
            decoder.aux_hidden_state_layers = native_ids
            target = decoder
        else:
            model.set_aux_hidden_state_layers(native_ids)
            target = model
        forward = target.forward
        model._reference_steps = []

        def forward_keeping_aux(*args, **kwargs):
            output = forward(*args, **kwargs)
            if not isinstance(output, tuple):
                raise RuntimeError(f"{type(target).__name__} has no native aux hidden states")
            hidden, aux = output
            model._reference_steps.append([a.clone() for a in aux])
            return hidden

        target.forward = forward_keeping_aux

    def take(model):
        steps = model._reference_steps
        model._reference_steps = []
        return steps

    llm.apply_model(install)
    results = []
    for ids in spec["prompts"]:
        llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1), use_tqdm=False)
        steps = llm.apply_model(take)[0]
        # the decode step that samples the one token is not run; aux states come in
        # ascending id order, results in the order the layers were asked for
        ascending = sorted(set(native_ids))
        prefill = [steps[0][ascending.index(i)] for i in native_ids]
        assert all(state.shape[0] == len(ids) for state in prefill), "prefill split in steps"
        results.append(prefill)
    torch.save(results, spec["out"])


if __name__ == "__main__":
    main()
