"""Test-only: `spec-compat run ARGS...` with the stock generator's engine in float32
(`spec_compat.rehearse.child.float32_engine`): the 1e-5 oracle needs float32 and the stock code
passes dtype="auto".  The engine's dtype is decided in the driver (workers receive the
config), so the override lives here and the script runs unchanged."""

import sys

import wrapt


@wrapt.when_imported("speculators.data_generation.vllm_hidden_states_generator")
def _float32(module):
    from spec_compat.rehearse.child import float32_engine

    float32_engine(module)


if __name__ == "__main__":
    from spec_compat.__main__ import main

    sys.exit(main(["run", *sys.argv[1:]]))
