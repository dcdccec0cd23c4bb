"""TrialConfig: one flat dict round trip, unique field names, validation naming the field."""

from __future__ import annotations

import json

import pytest

from lipsweep.core.config_base import ConfigError
from lipsweep.core.field_docs import field_docs
from lipsweep.settings.config import (
    FIELD_SECTION,
    SECTIONS,
    TrialConfig,
    parse_override,
    section_keys,
)


def test_flat_round_trip_is_json_and_exact():
    cfg = TrialConfig.from_flat(
        {
            "epochs": 3,
            "regularizer": "jasmin",
            "k": 10,
            "lam": 1e-3,
            "aggregation": "max",
            "fgsm_eps": [2, 4, 8],
        }
    )
    flat = cfg.to_flat()
    assert json.loads(json.dumps(flat)) == flat
    assert TrialConfig.from_flat(flat) == cfg
    assert flat["k"] == 10 and "lam_q" not in flat  # settings that do not apply are left out


def test_field_names_are_unique_and_documented():
    names = [n for cls in SECTIONS.values() for n in section_keys(cls)]
    assert len(names) == len(set(names)) == len(FIELD_SECTION)
    for cls in SECTIONS.values():
        docs = field_docs(cls)
        missing = [n for n in section_keys(cls) if not docs.get(n)]
        assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


@pytest.mark.parametrize(
    "flat,field",
    [
        ({"modle": "vit_base_patch16_224"}, "modle"),
        ({"epochs": -1}, "epochs"),
        ({"epochs": "ten"}, "epochs"),
        ({"patch_size": 5}, "patch_size"),
        ({"lr": 0}, "lr"),
        ({"optimizer": "lion"}, "optimizer"),
        ({"num_classes": 100}, "num_classes"),  # embedded data has 10 classes
        ({"regularizer": "jasmin", "k": 1}, "k"),
        ({"regularizer": "jasmin", "k": 65}, "k"),  # 65 tokens: k must be <= 64
        ({"regularizer": "jasmin", "lam": -1e-2}, "lam"),
        ({"regularizer": "jasmin", "aggregation": "median"}, "aggregation"),
        ({"regularizer": "jasmin", "lam_q": 1e-2}, "lam_q"),
        ({"regularizer": "specformer", "k": 10}, "k"),
        ({"regularizer": "none", "lam": 1e-2}, "lam"),
        ({"warmup_epochs": 50, "epochs": 10}, "warmup_epochs"),
        ({"keep_checkpoints": 1}, "keep_checkpoints"),
        ({"device": "tpu"}, "device"),
    ],
)
def test_bad_values_name_the_field(flat, field):
    with pytest.raises(ConfigError) as exc:
        TrialConfig.from_flat(flat)
    assert exc.value.field == field


def test_yaml_errors_name_the_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("epochs: 3\nlr: -1\n")
    with pytest.raises(ConfigError) as exc:
        TrialConfig.from_yaml(p)
    assert str(p) in str(exc.value) and exc.value.field == "lr"
    p.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        TrialConfig.from_yaml(p)


def test_overrides_parse_as_yaml():
    key, value = parse_override("lam=1e-2")  # YAML 1.1 reads 1e-2 as a string ...
    cfg = TrialConfig.from_flat({"regularizer": "jasmin", key: value})
    assert cfg.regularizer.lam == 0.01  # ... and the config coerces it
    assert parse_override("fgsm_eps=[2, 4]") == ("fgsm_eps", [2, 4])
    with pytest.raises(ConfigError):
        parse_override("epochs")


def test_lr_schedule_warmup_then_cosine():
    cfg = TrialConfig.from_flat({"epochs": 10, "lr": 1.0, "warmup_epochs": 2}).optim
    lrs = [cfg.lr_at(s, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.05) and lrs[19] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[20:], lrs[21:]))
    assert lrs[-1] < 1e-3


@pytest.mark.parametrize(
    ("value", "cuda", "cpu"), [("auto", True, False), (True, True, True), (False, False, False)]
)
def test_compile_is_auto_true_or_false(value, cuda, cpu):
    """'auto' (the default) compiles on CUDA only; a YAML bool forces either way."""
    run = TrialConfig.from_flat({"compile": value}).run
    assert run.compiles_on("cuda") is cuda and run.compiles_on("cpu") is cpu
    assert TrialConfig().run.compile == "auto"


@pytest.mark.parametrize(("value", "words"), [("yes", "'auto'"), (1, "true or false or a string")])
def test_compile_refuses_anything_else_naming_the_field(value, words):
    with pytest.raises(ConfigError, match=f"^compile: must be .*{words}"):
        TrialConfig.from_flat({"compile": value})


def test_one_finite_rule_for_every_number_check():
    from lipsweep.core.config_base import INT_LIMIT, check_max, check_positive, finite

    assert finite(1) and finite(-2.5) and finite(INT_LIMIT)
    for bad in (True, float("inf"), float("nan"), INT_LIMIT + 1, "1", None):
        assert not finite(bad)
    with pytest.raises(ConfigError, match="lam: must be a number"):
        check_positive("lam", 2**64)
    with pytest.raises(ConfigError, match=r"steps: must be <= 10 \(why\)"):
        check_max("steps", 10**30, 10, "why")


def test_one_check_int_for_settings_and_options():
    from lipsweep.api.options import ConfirmOptions
    from lipsweep.core.config_base import check_int

    assert check_int("n", 3, 1) == 3
    with pytest.raises(ConfigError, match=r"images: must be >= 0 \(0: the whole test split\)"):
        ConfirmOptions(experiment="e", images=-1)
    with pytest.raises(ConfigError, match="top: must be an integer, got True"):
        ConfirmOptions(experiment="e", top=True)
