"""How the architecture sweep (tests/e2e/sweep.py) builds a class that transformers has but
whose own model cannot serve: its config alone, for seeded weights, and why."""

from __future__ import annotations

import json

import pytest

from e2e import sweep

ARCH = "Qwen3ForCausalLM"


def candidate(**fields) -> sweep.Candidate:
    return sweep.Candidate(ARCH, "qwen3", False, None, **fields)


@pytest.fixture
def builds(monkeypatch):
    """sweep.build recording each carrier, raising `errors[carrier]` where one is given."""
    calls: list[str | None] = []
    errors: dict[str | None, Exception] = {}

    def build(arch, directory, seed=0, carrier=None):
        calls.append(carrier)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "partial").touch()  # what a failed build may leave behind
        if carrier in errors:
            raise errors[carrier]
        return directory

    monkeypatch.setattr(sweep, "build", build)
    return calls, errors


def test_a_model_transformers_cannot_build_runs_from_its_config_on_seeded_weights(builds, tmp_path):
    calls, errors = builds
    errors[None] = TypeError("unsupported operand type(s) for //: 'NoneType' and 'NoneType'")
    built = sweep.build_or_seed(candidate(), tmp_path / "m")
    assert calls == [None, ARCH]
    assert built.carrier == ARCH and built.kind == "plain+seeded"
    assert built.fallback == (
        "transformers cannot build its model: TypeError: unsupported operand type(s) for //: "
        "'NoneType' and 'NoneType'"
    )
    assert sweep.describe(built.carrier, ARCH) == "transformers' own config class"


def test_a_model_that_builds_keeps_its_route(builds, tmp_path):
    calls, _ = builds
    c = candidate()
    assert sweep.build_or_seed(c, tmp_path / "m") is c
    assert calls == [None]


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({}, sweep.TooLarge("not shrunk")),  # a size problem, not a model transformers lacks
        ({"carrier": "LlamaForCausalLM"}, KeyError("a stand-in's own failure")),
        ({"carrier": ARCH}, OSError("its config cannot be built")),
    ],
)
def test_no_fallback_for_a_model_too_large_or_already_on_a_carrier(builds, tmp_path, given, error):
    calls, errors = builds
    errors[given.get("carrier")] = error
    with pytest.raises(type(error)):
        sweep.build_or_seed(candidate(**given), tmp_path / "m")
    assert calls == [given.get("carrier")]


def test_the_seeded_route_saves_transformers_config_under_the_class_and_no_weights(tmp_path):
    pytest.importorskip("transformers")
    directory = sweep.build(ARCH, tmp_path / "m", carrier=ARCH)
    config = json.loads((directory / "config.json").read_text())
    assert config["architectures"] == [ARCH]
    assert config["model_type"] == "qwen3" and config["num_hidden_layers"] == sweep.LAYERS
    assert not list(directory.glob("*.safetensors"))


def test_classes_saved_in_transformers_own_layout_say_why():
    for arch, why in sweep.OWN_LAYOUT.items():
        assert arch not in sweep.NOT_RUNNABLE, arch  # run, on seeded weights, not blocked
        assert "layout" in why, arch


def test_a_class_saved_in_transformers_own_layout_runs_from_a_config_vllm_reads():
    layout = "Qwen3VLMoeForConditionalGeneration"  # transformers' config, its weights seeded
    assert sweep.route_of(layout, object, True) == (layout, sweep.OWN_LAYOUT[layout])
    released = "NemotronH_Omni_Reasoning_V3"  # its config lacks keys: the released ones
    assert sweep.route_of(released, object, True) == (sweep.RELEASED, sweep.OWN_LAYOUT[released])
    assert sweep.route_of(ARCH, object, True) == (None, None)  # transformers' own model
    assert sweep.Candidate(layout, "m", True, None, carrier=layout).kind == "plain+seeded+wrapper"


def test_a_composite_config_with_an_unset_auto_sub_config_shrinks():
    """A sub-config typed AutoConfig and left None (Nemotron-H Omni's audio_config) stays
    None: AutoConfig() raises, and the model then has no such tower."""
    transformers = pytest.importorskip("transformers")
    arch = "NemotronH_Omni_Reasoning_V3"
    if not hasattr(transformers, arch):
        pytest.skip(f"transformers {transformers.__version__} has no {arch}")
    config = sweep.shrunk_config(getattr(transformers, arch).config_class, arch)
    assert config.audio_config is None
    assert config.text_config.num_hidden_layers == sweep.LAYERS
