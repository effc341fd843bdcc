"""The names that patches, the transport, the start-up hook and the tests share.

One place for every string two sides must agree on: the stock modules, the RPC methods the
driver calls on the workers, the keys and attributes one patch leaves for another, and the
environment variables that carry a parent's selection into its children.
"""

from __future__ import annotations

# -- the stock extractor (speculators 0.3.0 / 0.4.x) ---------------------------------------
GENERATOR = "speculators.data_generation.vllm_hidden_states_generator"
WORKER = "speculators.data_generation.custom_worker"

# -- RPC methods of the stock worker extension (driver -> every worker) ----------------------
RESET_CAPTURE = "_reset_capture"
STORE_CAPTURED = "_store_captured_states"
GET_CAPTURED = "_get_captured_states"
#: speculators 0.4.x: the prefill rows of each request in the coming step
SET_METADATA = "_set_request_metadata"
#: added by shm_transport_worker: the driver holds no result in these segments any more
RECYCLE_SEGMENTS = "_spec_compat_recycle"

# -- what one patch hands another (the typed values are in patches/_handoff.py) -------------
#: key of a per-request reply: how many rows failed the worker's value test
WORKER_CHECKED = "spec_compat:bad_rows"
#: attribute of the driver's executor holding a `_handoff.WorkerChecks` (shm_transport_driver
#: records it, generate_checks reads it); tests/e2e/run_extractor.py spells it out
WORKER_CHECKS = "spec_compat_worker_checks"
#: vLLM's `collective_rpc` keyword for a reply that is a future: executor_pipelined_steps sets
#: it, and the MultiprocExecutor patches it wraps (declared `after=`) pass such replies on
NON_BLOCK = "non_block"
#: attribute of the driver's scheduler holding a `_handoff.SchedulerRebuild` (scheduler_rebuild
#: keeps it, generate_recovery uses it)
SCHEDULER_REBUILD = "spec_compat_rebuild"
#: attribute of a worker and of its capture holding a `_handoff.StepRows` (model_runner_v2_rows
#: keeps it, worker_eagle3_capture arranges each step's rows with it)
STEP_ROWS = "_spec_compat_step_rows"
#: attribute of a worker (shm_transport_worker): its transport, for `startup.worker_report`
WORKER_TRANSPORT = "_spec_compat_transport"

# -- the environment: a parent's selection, inherited by every child process ----------------
#: the comma-separated names of the patches `apply()` chose
ENV_PATCHES = "SPEC_COMPAT_PATCHES"
#: a replicas run's role for this process (JSON: a plan step, or one chunk), set by
#: `spec_compat.replicas`; `spec-compat run` then adds REPLICA_PATCH, which reads it
ENV_REPLICA = "SPEC_COMPAT_REPLICA"
REPLICA_PATCH = "replica_dataset_range"
#: "0" when the parent chose `strict=False`
ENV_STRICT = "SPEC_COMPAT_STRICT"
#: "1": the extractor does not refuse a class by its recorded failure (the release matrix
#: sets it, since it measures afresh what the records say)
ENV_REMEASURE = "SPEC_COMPAT_REMEASURE"
#: "0" switches the start-up hook off (children then run unpatched)
ENV_STARTUP = "SPEC_COMPAT_STARTUP"
#: a user's patch selection for `spec-compat run`, doctor and rehearsals (comma-separated)
ENV_ONLY = "SPEC_COMPAT_ONLY"
ENV_EXCLUDE = "SPEC_COMPAT_EXCLUDE"
