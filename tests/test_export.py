"""`lipsweep export` (lipsweep.decide.export): checks made before anything is written (the
registered model's name, a run's damaged checkpoint artifacts; real MLflow on SQLite, real
files), and an export of the session's four-trial sweep that round-trips exactly."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch

from lipsweep.__main__ import main
from lipsweep.settings.config import TrialConfig

SMALL = {"model": "vit_tiny_patch16_224", "depth": 1, "embed_dim": 32, "num_heads": 2}


@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "MLflow refuses the model name ''"),
        ("a/b", "cannot contain '/'"),
        ("x" * 300, "at most 256"),
    ],
    ids=["empty", "slash", "long"],
)
def test_export_register_name_is_checked_first(tmp_path, capsys, name, problem):
    """'' is refused (it would register nothing and exit 0), and a refused name is found
    before the export is written, by an error naming --register, not --tracking-uri."""
    out = tmp_path / "export"
    uri = f"sqlite:///{tmp_path / 'absent' / 'mlflow.db'}"
    argv = ["export", "--experiment", "x", "--out", str(out), "--tracking-uri", uri]
    assert main([*argv, "--register", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: --register:" in err and problem in err, err
    assert not out.exists() and not (tmp_path / "absent").exists()


def _damage(text: bytes, name: str, how: str) -> bytes:
    if name == "config.json":
        return b"{not json" if how == "text" else b"[1, 2]"
    return {"cut": text[: len(text) // 2], "empty": b"", "header": struct.pack("<Q", 2**62)}[how]


@pytest.mark.parametrize(
    "name,how,problem",
    [
        ("model.safetensors", "cut", "incomplete metadata"),
        ("model.safetensors", "empty", "header too small"),
        ("model.safetensors", "header", "header too large"),
        ("config.json", "text", "not JSON"),
        ("config.json", "list", "a JSON list, not a mapping"),
    ],
)
def test_export_of_a_damaged_checkpoint_names_the_run_and_the_artifact(
    tmp_path, capsys, name, how, problem
):
    """A run's checkpoint artifacts logged whole, then one damaged: exit 2, one line."""
    from _sweep_helpers import empty_store, mlflow_client
    from safetensors.torch import save

    from lipsweep.tracking.schema import TAG_KIND

    uri = empty_store(tmp_path / "m.db")
    c = mlflow_client(uri)
    exp = c.create_experiment("e", artifact_location=str(tmp_path / "art"))
    run = c.create_run(exp, tags={TAG_KIND: "trial"}).info.run_id
    ck = tmp_path / "ck"
    ck.mkdir()
    files = {
        "config.json": json.dumps(TrialConfig.from_flat(SMALL).to_flat()).encode(),
        "model.safetensors": save({"w": torch.zeros(64)}),
    }
    files[name] = _damage(files[name], name, how)
    for file, data in files.items():
        (ck / file).write_bytes(data)
    c.log_artifacts(run, str(ck), "checkpoint")
    c.set_terminated(run)
    out = tmp_path / "out"
    argv = ["export", "--experiment", "e", "--run-id", run, "--out", str(out)]
    assert main([*argv, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    (line,) = [s for s in err.splitlines() if s.startswith("lipsweep export:")]
    assert "Traceback" not in err and f"run {run}: its checkpoint/{name} artifact" in line, err
    assert problem in line and not out.exists(), line


@pytest.mark.slow
@pytest.mark.ray
def test_export_round_trip_is_exact(swept):
    """The export of the session's four-trial sweep (conftest.four_trial_sweep)."""
    from _sweep_helpers import lipsweep_cli as cli
    from safetensors.torch import load_file

    import lipsweep
    from lipsweep.data.loading import load_splits
    from lipsweep.trial.engine import evaluate_clean
    from lipsweep.vit.models import create_model

    out = swept / "export"
    cli(swept, "export", "--experiment", "exp", "--out", str(out))
    assert {p.name for p in out.iterdir()} >= {
        "model.safetensors",
        "config.json",
        "metrics.json",
        "README.md",
    }
    config = json.loads((out / "config.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    model = lipsweep.load_exported(out)
    assert not model.training
    cfg = TrialConfig.from_flat(config["trial_config"])
    splits = load_splits(cfg.data)
    acc = evaluate_clean(model, splits.x_eval, splits.y_eval, 64, torch.device("cpu"))
    assert acc == metrics["acc_clean"]
    # the exported weights are the trial's final checkpoint, bit for bit
    ckpt = Path(config["source"]["checkpoint"])
    original = create_model(cfg.model).eval()
    original.net.load_state_dict(load_file(str(ckpt / "model.safetensors")))
    x = splits.x_eval[:16].float() / 255
    with torch.no_grad():
        assert torch.allclose(model(x), original(x), atol=1e-6, rtol=0)
    # rebuilding with timm alone, from config.json
    import timm

    net = timm.create_model(config["timm"]["model_name"], **config["timm"]["kwargs"])
    net.load_state_dict(load_file(str(out / "model.safetensors")))
    # refuses a non-empty folder without --force
    proc = cli(swept, "export", "--experiment", "exp", "--out", str(out), check=False)
    assert proc.returncode == 2 and "--force" in proc.stderr
    cli(swept, "export", "--experiment", "exp", "--out", str(out), "--force")
