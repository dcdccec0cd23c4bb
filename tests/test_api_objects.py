"""The API takes Python objects as well as files: a dict or a parsed spec for a sweep's
space, a dict or a ``TrialConfig`` for a trial; the same checks, one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lipsweep import api
from lipsweep.search.space import load_space
from lipsweep.settings.config import TrialConfig

SMOKE = Path(__file__).resolve().parents[1] / "search_spaces" / "smoke.yaml"


def _dry_run(tmp_path: Path, space) -> api.SweepResult:
    return api.sweep(space=space, storage=str(tmp_path / "st"), dry_run=True)


def test_a_space_as_a_dict_or_a_spec_plans_what_its_file_plans(tmp_path):
    from_file = _dry_run(tmp_path, str(SMOKE))
    from_dict = _dry_run(tmp_path, yaml.safe_load(SMOKE.read_text()))
    from_spec = _dry_run(tmp_path, load_space(SMOKE))
    assert from_dict.counts == from_spec.counts == from_file.counts
    assert from_dict.planned[1:] == from_spec.planned[1:] == from_file.planned[1:]
    assert from_dict.experiment == "smoke" and from_dict.space == "space"
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize(
    "change,line",
    [
        ({"grid": []}, "space: grid: must be a non-empty list of blocks"),
        ({"fixed": {"epochs": -1}}, "space: epochs: must be > 0, got -1"),
        ({"nam": "x"}, "space: nam: unknown key"),
    ],
)
def test_a_bad_space_dict_is_one_line_naming_the_field(tmp_path, change, line):
    raw = {**yaml.safe_load(SMOKE.read_text()), **change}
    with pytest.raises(api.ConfigError) as exc:
        _dry_run(tmp_path, raw)
    assert str(exc.value).startswith(line) and "\n" not in str(exc.value)


def test_a_trial_config_as_a_dict_or_a_trial_config(tmp_path):
    opts = api.TrainOptions(config={"epochs": 2}, out=tmp_path / "o")
    assert isinstance(opts.config, TrialConfig) and opts.config.optim.epochs == 2
    cfg = TrialConfig.from_flat({"epochs": 3})
    assert api.TrainOptions(config=cfg).config is cfg
    with pytest.raises(api.ConfigError, match=r"^config: epochs: must be > 0, got -1$"):
        api.TrainOptions(config={"epochs": -1})
    with pytest.raises(api.ConfigError, match=r"^config: nope: unknown setting"):
        api.train(config={"nope": 1}, out=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_usage_errors_name_fields_from_the_api_and_flags_from_the_cli(tmp_path, capsys):
    """What only the world can answer (no sweep to resume, no MLflow store) names the option
    fields from Python and the flags on the command line, in the same words."""
    from lipsweep.cli import main

    with pytest.raises(api.UsageError) as exc:
        api.sweep(space=str(SMOKE), resume=True, storage=str(tmp_path))
    assert str(exc.value).startswith("resume: no sweep 'smoke'")
    assert "check storage and experiment, or drop resume" in str(exc.value)
    assert exc.value.cli_text.startswith("--resume: no sweep 'smoke'")

    uri = f"sqlite:///{tmp_path}/none/mlflow.db"
    with pytest.raises(api.UsageError, match=r"^tracking_uri sqlite:"):
        api.pareto(experiment="smoke", tracking_uri=uri)
    assert main(["pareto", "--experiment", "smoke", "--tracking-uri", uri]) == 2
    assert capsys.readouterr().err.startswith("lipsweep pareto: error: --tracking-uri sqlite:")
    assert not (tmp_path / "none").exists()
