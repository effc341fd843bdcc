"""Test-only: `spec-compat run ARGS...` with the stock generator's `ModelConfig` forced to
float32.  The stock code passes dtype="auto", which vLLM runs in bf16 even for a float32
checkpoint; the 1e-5 oracle needs float32.  The engine's dtype is decided in the driver
(workers receive the config), so the override lives here and the script runs unchanged."""

import sys

import wrapt


@wrapt.when_imported("speculators.data_generation.vllm_hidden_states_generator")
def _float32(module):
    stock = module.ModelConfig

    def float32_model_config(*args, **kwargs):
        kwargs["dtype"] = "float32"
        return stock(*args, **kwargs)

    module.ModelConfig = float32_model_config


if __name__ == "__main__":
    from spec_compat.__main__ import main

    sys.exit(main(["run", *sys.argv[1:]]))
