"""Which verifier models the capture serves: a model's route from its config and vLLM's
class for it (`support`), the per-class proofs measured by the architecture sweep
(`proofs`, `proofs.json`), and where an instance keeps its decoder layers (`decoder`).

It imports the engine only (versions, names, the process's registry for a patch's state).
"""
