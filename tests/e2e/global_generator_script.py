"""A script whose generator is still alive when the interpreter exits (a module global)."""

import sys

from speculators.data_generation.vllm_hidden_states_generator import VllmHiddenStatesGenerator

if __name__ == "__main__":
    generator = VllmHiddenStatesGenerator(sys.argv[1], layer_ids=[0, 2, 3], max_model_len=512)
    results = generator.generate([list(range(5, 45)), list(range(9, 30))])
    print(f"generated {len(results)}")
