"""`spec-compat run --replicas N [--ray-address ADDR] SCRIPT ARGS...`: the unchanged data
script, data-parallel on Ray.  `run.py` drives, `chunks.py` parts the dataset,
`merge.py` makes one dataset of the parts.

It imports the engine's names and `spec_compat.data`; only the CLI imports it.
"""
