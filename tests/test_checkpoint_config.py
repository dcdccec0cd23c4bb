"""A checkpoint carries the hash of its configuration and resumes only under it."""

from __future__ import annotations

import json

import pytest
from _sweep_helpers import TINY_FLAT

from lipsweep.__main__ import main
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.checkpoint import (
    CONFIG_HASH_KEY,
    CheckpointError,
    config_digest,
    foreign_checkpoint,
)
from lipsweep.trial.run import run_trial

FLAT = {**TINY_FLAT, "epochs": 1, "evaluate": False, "train_size": 64, "eval_size": 16}


def _trained(tmp_path):
    out = tmp_path / "out"
    assert (
        main(["train", "--out", str(out), *(f"--set={k}={json.dumps(v)}" for k, v in FLAT.items())])
        == 0
    )
    return out


def test_train_refuses_another_configs_checkpoint_without_config_json(tmp_path, capsys):
    """With config.json gone, `train` must not resume lr=1e-3's checkpoint under lr=2e-3 and
    relabel it (config.json rewritten, metrics written for the wrong config)."""
    out = _trained(tmp_path)
    state = json.loads((out / "checkpoints" / "epoch_0001" / "state.json").read_text())
    assert state[CONFIG_HASH_KEY] == config_digest(TrialConfig.from_flat(FLAT).to_flat())
    (out / "config.json").unlink()
    metrics = (out / "metrics.json").read_bytes()
    capsys.readouterr()
    argv = ["train", "--out", str(out), *(f"--set={k}={json.dumps(v)}" for k, v in FLAT.items())]
    assert main([*argv, "--set=lr=0.002"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "lr 0.001 -> 0.002" in err and "epoch_0001" in err, err
    assert not (out / "config.json").exists()  # nothing half-written
    assert (out / "metrics.json").read_bytes() == metrics
    assert main(argv) == 0  # the same config resumes (its last epoch is done: evaluates only)


def test_run_trial_refuses_a_checkpoint_of_another_config(tmp_path):
    out = _trained(tmp_path)
    other = TrialConfig.from_flat({**FLAT, "seed": 1})
    assert "seed 0 -> 1" in foreign_checkpoint(out / "checkpoints", other.to_flat())
    with pytest.raises(CheckpointError, match="another configuration"):
        run_trial(other, out, progress=False)


def test_a_checkpoint_that_records_no_configuration_resumes_under_none(tmp_path):
    """A checkpoint whose state.json holds neither the config nor its hash (written by
    another tool, or edited) could belong to any config: it is refused, never resumed."""
    import torch

    from lipsweep.trial.checkpoint import save_checkpoint
    from lipsweep.vit.models import create_model

    cfg = TrialConfig.from_flat(FLAT)
    model = create_model(cfg.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    root = tmp_path / "out" / "checkpoints"
    save_checkpoint(root, 1, model.state_dict(), opt.state_dict(), {}, {"history": []})
    why = "it does not record the configuration it was trained with"
    assert foreign_checkpoint(root, cfg.to_flat()) == f"{root / 'epoch_0001'}: {why}"
    with pytest.raises(CheckpointError, match=why):
        run_trial(cfg, tmp_path / "out", progress=False)
