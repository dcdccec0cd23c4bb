"""pareto + export on a real (tiny) sweep: tags, artifacts, idempotence, exact round trip."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.ray]

EXPERIMENT = "exp"  # the session's four-trial sweep (conftest.four_trial_sweep)


def cli(cwd: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "lipsweep", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    return proc


@pytest.fixture(scope="module")
def swept(four_trial_sweep) -> Path:
    """The folder of a finished 4-trial sweep whose store is its ``mlflow.db``, the default
    ``--tracking-uri`` there (the same sweep tests/test_sweep.py checks)."""
    d, proc = four_trial_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    return d


def _client(d: Path):
    from lipsweep.tracking import TrackingReader

    return TrackingReader(f"sqlite:///{d / 'mlflow.db'}", EXPERIMENT)


def _state(d: Path):
    c = _client(d)
    rs = c.runs()
    kids = sorted(
        (r for r in rs if r.data.tags.get("lipsweep.kind") == "trial"), key=lambda r: r.info.run_id
    )
    parent = next(r for r in rs if r.data.tags.get("lipsweep.kind") == "sweep")
    tags = [
        (r.info.run_id, r.data.tags.get("pareto"), r.data.tags.get("pareto_rank")) for r in kids
    ]
    arts = sorted(a.path for a in c.list_artifacts(parent.info.run_id, "pareto"))
    doc = json.loads(
        Path(
            c.download_artifacts(parent.info.run_id, "pareto/pareto.json", str(d / "dl"))
        ).read_text()
    )
    return tags, arts, doc


def test_pareto_tags_runs_logs_artifacts_and_is_idempotent(swept):
    out1 = cli(swept, "pareto", "--experiment", EXPERIMENT).stdout
    first = _state(swept)
    out2 = cli(swept, "pareto", "--experiment", EXPERIMENT).stdout
    second = _state(swept)
    assert first == second and out1 == out2
    tags, arts, doc = first
    assert all(t[1] in ("true", "false") for t in tags) and any(t[1] == "true" for t in tags)
    assert {"pareto/pareto.json", "pareto/pareto_scatter.png", "pareto/pareto_parallel.png"} <= set(
        arts
    )
    assert doc["counts"]["runs"] == 4
    assert "rank" in out1 and "acc_pgd_4" in out1


def test_export_round_trip_is_exact(swept):
    from safetensors.torch import load_file

    import lipsweep
    from lipsweep.data.loading import load_splits
    from lipsweep.settings.config import TrialConfig
    from lipsweep.trial.engine import evaluate_clean
    from lipsweep.vit.models import create_model

    out = swept / "export"
    cli(swept, "export", "--experiment", EXPERIMENT, "--out", str(out))
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
    from safetensors.torch import load_file as lf

    net = timm.create_model(config["timm"]["model_name"], **config["timm"]["kwargs"])
    net.load_state_dict(lf(str(out / "model.safetensors")))
    # refuses a non-empty folder without --force
    proc = cli(swept, "export", "--experiment", EXPERIMENT, "--out", str(out), check=False)
    assert proc.returncode == 2 and "--force" in proc.stderr
    cli(swept, "export", "--experiment", EXPERIMENT, "--out", str(out), "--force")


def test_bad_review_input_exits_2(swept):
    p = cli(swept, "pareto", "--experiment", "nope", check=False)
    assert p.returncode == 2 and "no experiment 'nope'" in p.stderr
    objective = ["pareto", "--experiment", EXPERIMENT, "--objective"]
    p = cli(swept, *objective, "acc_bogus:max", check=False)
    assert p.returncode == 2 and "available metrics" in p.stderr and "acc_pgd_4" in p.stderr
    p = cli(swept, *objective, "acc_clean:up", check=False)
    assert p.returncode == 2
    p = cli(
        swept,
        "export",
        "--experiment",
        EXPERIMENT,
        "--out",
        str(swept / "x"),
        "--select",
        "best:acc",
        check=False,
    )
    assert p.returncode == 2 and not (swept / "x").exists()


def test_experiment_without_finished_runs_exits_2(tmp_path):
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").create_experiment("empty")
    p = cli(tmp_path, "pareto", "--experiment", "empty", check=False)
    assert p.returncode == 2 and "no FINISHED trial runs" in p.stderr
