"""Stacks: the order of the patches that wrap one target comes from their declarations."""

from __future__ import annotations

import pytest

from spec_compat import REGISTRY, patches
from spec_compat.engine import stacks
from spec_compat.engine.patch import Patch, State
from spec_compat.engine.probes import Need, Verdict
from spec_compat.engine.registry import Registry
from spec_compat.engine.stacks import StackError

#: (inner, outer, why): the orders the patches' code relies on.  Each must follow from the
#: declarations alone, whatever the listing order.
RELIED_ON = [
    ("shm_transport_driver", "v030_collective_rpc_reply", "it wraps tensors, not descriptors"),
    ("shm_transport_driver", "v030_capture_guard", "it counts rows of tensors"),
    ("shm_transport_driver", "executor_pipelined_steps", "the transport sees NON_BLOCK futures"),
    ("v030_capture_guard", "executor_pipelined_steps", "the guard sees NON_BLOCK futures"),
    ("executor_pipelined_steps", "executor_rpc_in_step", "a Ctrl-C waits for pipelined replies"),
    ("v04_results_in_input_order", "v04_batches_of_max_num_seqs", "one stock call at a time"),
    ("v04_results_in_input_order", "generate_checks", "checks name prompts in input order"),
    ("v04_batches_of_max_num_seqs", "generate_checks", "checks see the caller's whole input"),
    ("generate_checks", "generate_recovery", "recovery sees every failure"),
    ("v04_batches_of_max_num_seqs", "generate_recovery", "recovery sees every failure"),
    ("worker_eagle3_capture", "shm_transport_worker", "the stock class's method, inherited"),
    ("worker_eagle3_capture", "model_runner_v2_rows", "it subclasses the capture's class"),
    ("model_runner_v2_rows", "shm_transport_worker", "the transport stores ordered metadata"),
    ("worker_eagle3_capture", "worker_kernel_check", "it checks the model the capture set up"),
    ("worker_kernel_check", "model_runner_v2_rows", "a method of the class it subclasses"),
    ("scheduler_finished_requests_kept", "scheduler_rebuild", "a rebuilt scheduler keeps it"),
    ("kv_cache_config_specs", "kv_cache_hybrid_plan", "it wraps that patch's adapter"),
    ("engine_batch_defaults", "v030_whole_prompt_prefill", "it reads the chunked prefill set"),
]

#: every stack as it is applied (the order came from declarations; a new patch adds itself)
TODAY = {
    "vllm_hidden_states_generator.CacheConfig": [
        "cache_config_prefix_caching",
        "cache_config_extensible_kv_cache",
        "cpu_attention_block_size",
    ],
    "vllm_hidden_states_generator.SchedulerConfig": [
        "scheduler_config_initvars",
        "engine_batch_defaults",
        "v030_whole_prompt_prefill",
    ],
    "vllm_hidden_states_generator.Scheduler": [
        "scheduler_block_size",
        "scheduler_kv_cache_view",
        "scheduler_finished_requests_kept",
        "scheduler_rebuild",
    ],
    "vllm_hidden_states_generator.VllmHiddenStatesGenerator.__init__": [
        "request_block_hashes_off",
        "model_runner_v1",
        "capture_model_check",
        "tensor_parallel_size_check",
    ],
    "vllm_hidden_states_generator.MultiprocExecutor": [
        "shm_transport_driver",
        "executor_sample_tokens",
        "executor_kv_cache_layout",
        "v030_collective_rpc_reply",
        "v030_capture_guard",
        "executor_pipelined_steps",
        "executor_rpc_in_step",
        "cpu_worker_cores",
    ],
    "vllm_hidden_states_generator.VllmHiddenStatesGenerator.generate": [
        "v04_results_in_input_order",
        "v04_batches_of_max_num_seqs",
        "generate_checks",
        "generate_recovery",
        "driver_copy_threads",
    ],
    "custom_worker.HiddenStatesWorkerExtension": [
        "worker_eagle3_capture",
        "worker_kernel_check",
        "model_runner_v2_rows",
        "shm_transport_worker",
    ],
}


def short(target: str) -> str:
    return target.removeprefix("speculators.data_generation.")


def test_every_stack_is_applied_as_before():
    found = {short(t): [p.name for p in members] for t, members in REGISTRY.stacks()}
    assert {t: found.get(t) for t in TODAY} == TODAY
    # and the declarations agree with the listing: nothing else moved either
    assert [p.name for p in REGISTRY.ordered()] == list(patches.ORDER)


@pytest.mark.parametrize("listing", ["as listed", "reversed"])
def test_the_orders_the_code_relies_on_come_from_the_declarations(listing):
    declared = list(REGISTRY.patches.values())
    ordered = stacks.order(declared if listing == "as listed" else declared[::-1])
    position = {p.name: i for i, p in enumerate(ordered)}
    for inner, outer, why in RELIED_ON:
        assert position[inner] < position[outer], f"{outer} must wrap {inner}: {why}"
        same = stacks.stack_of(REGISTRY.patches[inner], declared)
        assert same == stacks.stack_of(REGISTRY.patches[outer], declared), (inner, outer)


def test_a_dropped_relation_is_caught():
    declared = [
        p._replace(after=()) if p.name == "executor_rpc_in_step" else p
        for p in REGISTRY.patches.values()
    ]
    position = {p.name: i for i, p in enumerate(stacks.order(declared[::-1]))}
    assert position["executor_rpc_in_step"] < position["executor_pipelined_steps"]


def fake(name: str, target: str = "Engine", module: str = "stock", **relations) -> Patch:
    def probe(m):
        return Verdict(Need.NEEDED, name)

    return Patch(name, "driver", module, target, "test", probe, lambda o: o, **relations)


def test_a_stack_is_ordered_by_its_declarations_then_by_listing():
    listed = [
        fake("outer", after=("middle",)),
        fake("free"),
        fake("middle", after=("inner",)),
        fake("inner"),
        fake("method", "Engine.run", before=("inner",)),
        fake("elsewhere", "build"),
    ]
    names = [p.name for p in stacks.order(listed)]
    assert names == ["free", "method", "inner", "middle", "outer", "elsewhere"]
    assert [(t, [p.name for p in ps]) for t, ps in stacks.stacks(listed)] == [
        ("stock.Engine", ["free", "method", "inner", "middle", "outer"])
    ]


def test_broken_declarations_are_refused_with_the_reason():
    with pytest.raises(StackError, match="no patch 'gone' is registered"):
        stacks.order([fake("a", after=("gone",))])
    with pytest.raises(StackError, match=r"'b' wraps stock\.build, not stock\.Engine"):
        stacks.order([fake("a", after=("b",)), fake("b", "build")])
    with pytest.raises(StackError, match="cycle: a wraps c wraps b wraps a"):
        stacks.order([fake("a", after=("c",)), fake("b", after=("a",)), fake("c", after=("b",))])
    with pytest.raises(StackError, match="another patch of its stock module"):
        stacks.order([fake("a", superseded_by=("b",)), fake("b", module="other")])
    with pytest.raises(StackError, match="superseded_by= relations form a cycle"):
        stacks.order([fake("a", superseded_by=("b",)), fake("b", superseded_by=("a",))])
    registry = Registry()
    registry.register(fake("a", before=("b",)))
    registry.register(fake("b", before=("a",)))
    with pytest.raises(StackError, match="cycle"):
        registry.apply()


@pytest.fixture
def stock(stock_module):
    return stock_module("def forward():\n    return 'stock'\n\n\ndef setup(): ...\n")


def test_a_superseded_patch_says_so_and_is_not_applied(stock):
    registry = Registry()
    registry.register(
        fake("alias", "forward", stock, superseded_by=("capture",))._replace(
            wrap=lambda original: lambda: "aliased"
        )
    )
    registry.register(fake("capture", "setup", stock))
    registry.apply()
    module = __import__(stock)
    result = registry.results["alias"]
    assert result.state is State.SUPERSEDED and result.reason.startswith("superseded by capture")
    assert module.forward() == "stock"
    registry.revert()
    registry.apply(exclude=["capture"])  # without the patch that supersedes it, it applies
    assert registry.results["alias"].state is State.APPLIED and module.forward() == "aliased"
    registry.revert()


def test_doctor_shows_each_stack_in_order():
    found = stacks.stacks([fake("a"), fake("b", after=("a",))])
    described = stacks.described(found, {"b": State.APPLIED})
    assert described == [
        {
            "target": "stock.Engine",
            "patches": [{"name": "a", "state": "-"}, {"name": "b", "state": "applied"}],
        }
    ]
    assert stacks.rendered(described)[2:] == ["  stock.Engine", "    a  -", "    b  applied"]


def test_worker_checks_are_handed_over_as_a_typed_value():
    from spec_compat.patches._handoff import WorkerChecks

    executor = type("Executor", (), {})()
    WorkerChecks.restart(executor)  # no transport keeps a record: nothing to restart
    assert WorkerChecks.on(executor) is None and not WorkerChecks.clean(executor)
    WorkerChecks.kept_on(executor).counts += [0, 0]
    assert WorkerChecks.clean(executor)
    WorkerChecks.restart(executor)
    assert not WorkerChecks.clean(executor)  # a new call: nothing tested yet
    WorkerChecks.kept_on(executor).counts += [0, None]
    assert not WorkerChecks.clean(executor)
