"""Exports MLflow can load and serve, on a real MLflow SQLite store.

A run is made through the real writer (:class:`lipsweep.tracking.Tracker`), given a tiny
model's checkpoint artifacts, and exported with ``lipsweep.decide.sweep_runs.export_run``: no
sweep.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from _sweep_helpers import empty_store
from safetensors.torch import save_file

from lipsweep.settings.config import TrialConfig
from lipsweep.tracking import (
    EXPERIMENT_KIND,
    TAG_EXPERIMENT_KIND,
    TAG_GIT_COMMIT,
    TAG_VERSION,
    Tracker,
)
from lipsweep.vit.models import create_model

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(
    model="vit_tiny_patch16_224",
    img_size=32,
    patch_size=4,
    num_classes=10,
    depth=1,
    embed_dim=32,
    num_heads=2,
    normalization="cifar10",
    dataset="embedded",
    train_size=64,
    eval_size=16,
)


def _tracked_run(tmp: Path) -> tuple[Tracker, str, str, torch.nn.Module, dict]:
    """(tracker, parent id, child id, original model, flat config): a child run made by the
    real writer whose ``checkpoint/`` artifacts hold a randomly initialised tiny ViT."""
    cfg = TrialConfig.from_flat(TINY)
    flat = cfg.to_flat()
    torch.manual_seed(0)
    original = create_model(cfg.model).eval()
    tracker = Tracker(empty_store(tmp / "mlflow.db"), "serve", retries=0)
    parent = tracker.open_parent(
        str(tmp / "ray" / "serve"), "serve", {"num_trials": 2}, datasets=[flat, flat]
    )  # the sweep's trials: one dataset
    child = tracker.open_child(parent, "t0", "t0 tiny", flat)
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    save_file(
        {k: v.contiguous() for k, v in original.net.state_dict().items()},
        str(ckpt / "model.safetensors"),
    )
    (ckpt / "config.json").write_text(json.dumps(flat))
    tracker.log_artifacts(child, ckpt, "checkpoint")
    tracker.log_metrics(child, {"acc_clean": 7.0}, step=1)  # an epoch before the final one
    tracker.log_metrics(child, {"acc_clean": 12.5, "acc_pgd_4": 3.0}, step=2)
    tracker.end(child, "FINISHED")
    return tracker, parent, child, original, flat


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    return _tracked_run(tmp_path_factory.mktemp("serve"))


def _images(n: int = 4) -> torch.Tensor:
    return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def test_export_keeps_a_non_default_normalization(tracked, tmp_path):
    """CIFAR mean/std (not 0.5/0.5): the export reproduces the ORIGINAL model's logits, through
    lipsweep and through timm alone."""
    import timm

    import lipsweep
    from lipsweep.decide.sweep_runs import export_run

    tracker, _, child, original, _ = tracked
    assert original.mean.flatten().tolist() != pytest.approx([0.5] * 3)
    out = export_run(tracker, child, tmp_path / "export", selected_by="--run-id")
    config = json.loads((out / "config.json").read_text())
    assert config["normalization"]["mean"] == pytest.approx(original.mean.flatten().tolist())
    x = _images()
    with torch.no_grad():
        assert torch.allclose(lipsweep.load_exported(out)(x), original(x), atol=1e-5, rtol=0)
    # timm alone opens the same folder; its pretrained_cfg carries the CIFAR mean/std
    net = timm.create_model(f"local-dir:{out}", pretrained=True).eval()
    data = timm.data.resolve_model_data_config(net)
    assert data["mean"] == pytest.approx(original.mean.flatten().tolist())
    mean, std = (torch.tensor(data[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
    with torch.no_grad():
        assert torch.allclose(net((x - mean) / std), original(x), atol=1e-5, rtol=0)


def test_writer_tags_kind_version_commit_and_dataset_input(tracked):
    """Experiment kind (model-training view), lipsweep version, git commit, dataset input."""
    import lipsweep

    tracker, parent, child, _, flat = tracked
    client = tracker  # the tracking reader API
    assert tracker.experiment == "serve"
    assert (
        tracker.experiment_tags()[TAG_EXPERIMENT_KIND]
        == EXPERIMENT_KIND
        == "custom_model_development"
    )
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    for run_id in (parent, child):
        run = client.get_run(run_id)
        assert run.data.tags[TAG_VERSION] == lipsweep.__version__
        if head.returncode == 0:  # a checkout: the commit is recorded (none is not an error)
            assert run.data.tags[TAG_GIT_COMMIT] == head.stdout.strip()
        inputs = run.inputs.dataset_inputs
        assert [(d.dataset.name, len(d.dataset.digest)) for d in inputs] == [("embedded", 16)]
        assert [t.value for t in inputs[0].tags if t.key == "mlflow.data.context"] == ["train"]
    digest = client.get_run(child).inputs.dataset_inputs[0].dataset.digest
    assert client.get_run(parent).inputs.dataset_inputs[0].dataset.digest == digest
    from lipsweep.tracking import dataset_input

    assert dataset_input({**flat, "eval_seed": 1})["digest"] != digest
    assert dataset_input(flat)["digest"] == digest


@pytest.fixture(scope="module")
def registered(tracked, tmp_path_factory):
    from lipsweep.decide.sweep_runs import export_run, register_export

    tracker, _, child, original, _ = tracked
    out = export_run(tracker, child, tmp_path_factory.mktemp("reg") / "export", "--run-id")
    made = register_export(tracker, child, out, "tiny-vit")
    return tracker, out, made.version, made.model_uri


def test_registered_version_is_a_logged_model_of_the_trial_run_with_its_metrics(
    tracked, registered
):
    """MLflow 3: the export is a LoggedModel whose source run is the trial's child run (the
    run's Models tab), READY, with the run's final metrics linked (acc_clean ...) and its
    params; the registered version records the same model id, and the model lists it."""
    from mlflow import MlflowClient

    tracker, out, version, model_uri = registered
    _, _, child, _, flat = tracked
    client = MlflowClient(tracker.tracking_uri)
    run = client.get_run(child)
    models = client.search_logged_models(
        [run.info.experiment_id], filter_string=f"source_run_id = '{child}'"
    )
    assert len(models) == 1
    model = client.get_logged_model(models[0].model_id)
    assert model_uri == f"models:/{model.model_id}"
    assert (model.source_run_id, model.name, str(model.status)) == (child, "model", "READY")
    linked = {m.key: (m.value, m.step, m.run_id) for m in model.metrics}
    # each metric's final entry (acc_clean was 7.0 at step 1 and 12.5 at step 2), not its first
    assert linked == {"acc_clean": (12.5, 2, child), "acc_pgd_4": (3.0, 2, child)}
    assert model.params["regularizer"] == str(flat["regularizer"])
    assert [(o.model_id, o.step) for o in run.outputs.model_outputs] == [(model.model_id, 2)]
    # linking re-used each final entry: the run's history gains no point
    history = client.get_metric_history(child, "acc_clean")
    assert sorted((m.step, m.value) for m in history) == [(1, 7.0), (2, 12.5)]
    mv = client.get_model_version("tiny-vit", version)  # registered from the LoggedModel
    assert (mv.source, mv.run_id) == (f"models:/{model.model_id}", child)
    assert mv.model_id in (None, model.model_id)  # a database registry does not keep it
    assert client.get_model_version_download_uri("tiny-vit", version) == model.artifact_location
    assert json.loads(model.tags["mlflow.modelVersions"]) == [{"name": "tiny-vit", "version": 1}]
    assert json.loads((out / "metrics.json").read_text())["acc_clean"] == 12.5


@pytest.mark.slow
def test_the_readmes_registry_snippet_runs_as_written(registered, monkeypatch):
    """The README's ``models:/MODEL_NAME@champion`` snippet, with this test's model name and
    store, predicts what :func:`lipsweep.load_exported` gives for its images."""
    import re

    import mlflow

    import lipsweep

    tracker, out, _, _ = registered
    readme = (ROOT / "README.md").read_text()
    (code,) = [c for c in re.findall(r"```python\n(.*?)```", readme, re.S) if "models:/" in c]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracker.tracking_uri)
    mlflow.set_tracking_uri(tracker.tracking_uri)
    scope: dict = {"__name__": "__main__"}
    exec(compile(code.replace("MODEL_NAME", "tiny-vit"), "README.md", "exec"), scope)
    with torch.no_grad():
        want = lipsweep.load_exported(out)(torch.as_tensor(scope["images"])).numpy()
    assert scope["logits"].shape == want.shape and np.allclose(scope["logits"], want, atol=1e-5)


@pytest.mark.slow
def test_registered_pyfunc_predicts_the_exported_logits(registered):
    import mlflow.artifacts
    import mlflow.pyfunc

    import lipsweep
    from lipsweep.decide.export import card_body

    tracker, out, version, _ = registered
    assert version == "1"
    mv = tracker.model_version_by_alias("tiny-vit", "champion")
    card = (out / "README.md").read_text()
    assert card.startswith("---\n")  # the Hugging Face header: not in MLflow's description
    assert str(mv.version) == "1" and mv.description == card_body(card)
    assert mv.description.startswith("# vit_tiny_patch16_224")
    mlflow.set_tracking_uri(tracker.tracking_uri)
    model_dir = Path(
        mlflow.artifacts.download_artifacts("models:/tiny-vit/1", dst_path=str(out.parent / "m"))
    )
    assert (model_dir / "MLmodel").is_file() and not list(model_dir.rglob("*.pkl"))
    # what serving needs, and not the project files of the folder it was logged from (the
    # tests run in the checkout, beside uv.lock and pyproject.toml)
    assert not {"uv.lock", "pyproject.toml"} & {p.name for p in model_dir.iterdir()}
    assert (model_dir / "code" / "lipsweep" / "vit" / "export_format.py").is_file()
    assert not list((model_dir / "code").rglob("*.npz")) and not list(model_dir.rglob("*.yaml.*"))
    reqs = (model_dir / "requirements.txt").read_text()
    assert all(f"{name}==" in reqs for name in ("torch", "timm", "safetensors", "pyyaml"))
    assert (model_dir / "serving_input_example.json").is_file()
    mlmodel = yaml.safe_load((model_dir / "MLmodel").read_text())
    assert "python_model.pkl" not in (model_dir / "MLmodel").read_text()
    assert mlmodel["model_id"] and mlmodel["run_id"] == mv.run_id  # the LoggedModel's files
    x = _images()
    with torch.no_grad():
        expected = lipsweep.load_exported(out)(x).numpy()
    for uri in (
        "models:/tiny-vit/1",
        "models:/tiny-vit@champion",
        f"models:/{mlmodel['model_id']}",
    ):
        got = mlflow.pyfunc.load_model(uri).predict(x.numpy())
        assert got.shape == (4, 10) and abs(got - expected).max() < 1e-5
    # a fresh process loads it with the lipsweep code it carries
    np_file = out.parent / "x.npy"
    np.save(np_file, x.numpy())
    code = (
        "import sys, numpy as np, mlflow.pyfunc\n"
        "got = mlflow.pyfunc.load_model(sys.argv[1]).predict(np.load(sys.argv[2]))\n"
        "import lipsweep; print(lipsweep.__file__); np.save(sys.argv[2], got)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code, str(model_dir), str(np_file)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=out.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith(str(model_dir / "code" / "lipsweep")), proc.stdout
    assert abs(np.load(np_file) - expected).max() < 1e-5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_mlflow_models_serve_answers_on_loopback(registered):
    import lipsweep

    tracker, out, _, _ = registered
    port = _free_port()
    bindir = str(Path(sys.executable).parent)  # mlflow execs `uvicorn` from PATH
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": tracker.tracking_uri,
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "models",
            "serve",
            "-m",
            "models:/tiny-vit@champion",
            "--env-manager",
            "local",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    x = _images(2)
    body = json.dumps({"inputs": x.tolist()}).encode()
    try:
        deadline, answer = time.monotonic() + 300, None
        while answer is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            try:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/invocations",
                    data=body,
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(req, timeout=30) as resp:
                    answer = json.loads(resp.read())
            except OSError:
                time.sleep(1.0)
        assert answer is not None, "mlflow models serve did not answer within 300 s"
        with torch.no_grad():
            expected = lipsweep.load_exported(out)(x)
        got = torch.tensor(answer["predictions"])
        assert got.shape == (2, 10) and torch.allclose(got, expected, atol=1e-4, rtol=0)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_pareto_table_is_an_mlflow_table_announced_once():
    """pareto/pareto_table.json: pandas 'split' JSON, front first; the tag entry added once."""
    import pandas as pd

    from lipsweep.tracking.table import logged_artifacts_tag, pareto_table

    recs = [
        {
            "run_id": "b",
            "run_name": "b",
            "params": {"regularizer": "jasmin", "k": "0"},
            "metrics": {"acc_clean": 50.0, "acc_pgd_4": float("nan")},
        },
        {
            "run_id": "a",
            "run_name": "a",
            "params": {"regularizer": "none"},
            "metrics": {"acc_clean": 40.0, "acc_pgd_4": 9.0},
        },
    ]
    table = pareto_table(recs, [2, 1], ["acc_clean", "acc_pgd_4"])
    df = pd.read_json(__import__("io").StringIO(json.dumps(table)), orient="split")
    assert list(df["run_id"]) == ["a", "b"] and list(df["pareto"]) == [True, False]
    k = table["columns"].index("k")
    assert [row[k] for row in table["data"]] == [None, "0"]
    assert table["data"][1][-1] is None  # NaN is not valid JSON: written as null
    tag = logged_artifacts_tag(None, "pareto/pareto_table.json")
    assert json.loads(tag) == [{"path": "pareto/pareto_table.json", "type": "table"}]
    assert logged_artifacts_tag(tag, "pareto/pareto_table.json") is None


def test_mlflow_warnings_come_without_colour_codes_into_a_log(caplog, monkeypatch):
    """`export --register` printed MLflow's warnings with raw ANSI colour codes into a log,
    and MLflow copied the working folder's uv.lock into the model."""
    import logging
    import warnings

    from mlflow.utils.logging_utils import MlflowFormatter
    from mlflow.utils.warnings_utils import color_warning

    from lipsweep.tracking.model import _mlflow_saving
    from lipsweep.tracking.reader import plain_mlflow_lines

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.delenv("MLFLOW_UV_AUTO_DETECT", raising=False)
    with caplog.at_level(logging.WARNING, logger="lipsweep.tracking"):
        with _mlflow_saving():
            assert os.environ["MLFLOW_UV_AUTO_DETECT"] == "false"
            color_warning("An input example was not provided", stacklevel=1, color="yellow")
            warnings.warn("\x1b[33mAdd type hints to the `predict` method\x1b[0m", stacklevel=1)
    assert "MLFLOW_UV_AUTO_DETECT" not in os.environ
    assert caplog.messages == ["MLflow: An input example was not provided"]
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(MlflowFormatter("%(message)s"))
    logging.getLogger("mlflow").addHandler(handler)
    try:
        plain_mlflow_lines()
        logging.getLogger("mlflow.x").warning("careful", extra={"color": "red"})
    finally:
        logging.getLogger("mlflow").removeHandler(handler)
    assert handler.stream.getvalue() == "careful\n"
