"""The documented S3 policies allow what Ray Tune, MLflow and lipsweep call.

The policies live in ``deploy/iam/*.json`` and deploy/README.md shows each file verbatim (checked
here). Every other test replays real clients against moto's S3 on 127.0.0.1 behind
``tests/_s3_gate.py``, which judges each request by the caller's documented policy as AWS would
(moto's own IAM check cannot: see that module). The callers:

- the head (driver): Ray's own ``StorageContext`` (HeadBucket, folder markers, the validation
  marker), its upload of the driver's files (``tuner.pkl``, ``experiment_state-*.json``, the
  searcher state, each trial's ``result.json``/``params.json``), the deletion of checkpoints past
  ``num_to_keep``, ``--resume``'s reads; and MLflow's ``S3ArtifactRepository`` (boto3), which the
  head's MLflow server calls for ``--serve-artifacts``;
- a worker (a trial): Ray's ``persist_current_checkpoint`` with the worker's own identity, and
  lipsweep's ``fetch_prepared`` of the dataset.

A worker's identity must also be refused the driver's files and MLflow's artifacts (the trust
boundary of docs/reliability.md). ``test_a_real_tune_run_passes_the_policies`` runs the same
through a real ``Tuner.fit`` (head and worker identities in separate processes).
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import re
from pathlib import Path

import boto3
import numpy as np
import pyarrow.fs as pafs
import pytest
from _s3_gate import (
    ADMIN_KEY,
    Permission,
    PolicyGate,
    is_allowed,
    load_policy,
    serve,
)

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[1]
IAM = ROOT / "deploy" / "iam"
README = ROOT / "deploy" / "README.md"
BUCKET = "lipsweep-policy-test"
PREFIX = f"{BUCKET}/lipsweep"
HEAD_KEY, WORKER_KEY = "LSTESTHEAD", "LSTESTWORKER"
SECRET = "s" * 40
REGION = "us-east-1"


def _policies(bucket: str = BUCKET) -> dict[str, list[dict]]:
    return {
        "head": [load_policy(IAM / "s3-head.json", bucket)],
        "worker": [load_policy(IAM / "s3-worker.json", bucket)],
    }


@pytest.fixture(scope="module")
def s3():
    keys = {HEAD_KEY: "head", WORKER_KEY: "worker"}
    with serve(lambda app: PolicyGate(app, keys, _policies())) as (url, gate):
        _client(url, ADMIN_KEY).create_bucket(Bucket=BUCKET)
        yield url, gate


def _client(url: str, key: str):
    return boto3.client(
        "s3",
        endpoint_url=url,
        aws_access_key_id=key,
        aws_secret_access_key=SECRET,
        region_name=REGION,
    )


def _fs(url: str, key: str) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        access_key=key,
        secret_key=SECRET,
        region=REGION,
        endpoint_override=url.removeprefix("http://"),
        scheme="http",
    )


# libarrow's S3 client probes a bucket that cannot exist when it starts (HeadBucket of this
# name); that is answered 403 or 404 on AWS too, and pyarrow goes on either way.
ARROW_PROBE = "HEAD $extremelyunlikelytoexist$"


def _new_calls(gate: PolicyGate, start: int) -> list:
    return [c for c in gate.calls[start:] if c.operation != ARROW_PROBE]


# --- the policy files and the README ------------------------------------------------------------


def test_readme_shows_each_policy_file_verbatim():
    readme = README.read_text()
    files = sorted(IAM.glob("*.json"))
    assert {f.name for f in files} >= {"s3-head.json", "s3-worker.json"}
    for f in files:
        json.loads(f.read_text())
        assert f"`deploy/iam/{f.name}`" in readme, f.name
        assert f"```json\n{f.read_text()}```" in readme, f"README's copy of {f.name} differs"
    assert readme.count("```json\n") == len(files)  # no policy in the README but these


# --- the gate itself judges like AWS --------------------------------------------------------------


def test_gate_judges_conditions_and_wildcards_like_aws():
    arn = f"arn:aws:s3:::{BUCKET}"
    scoped = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": arn,
                "Condition": {"StringLike": {"s3:prefix": ["lipsweep/*"]}},
            }
        ]
    }
    head_bucket = Permission("s3:ListBucket", arn)  # HeadBucket carries no s3:prefix
    listing = Permission("s3:ListBucket", arn, {"s3:prefix": "lipsweep/ray_results/"})
    elsewhere = Permission("s3:ListBucket", arn, {"s3:prefix": "other/"})
    assert not is_allowed([scoped], head_bucket)  # apache/arrow#49949: the driver died here
    assert is_allowed([scoped], listing) and not is_allowed([scoped], elsewhere)
    if_exists = json.loads(json.dumps(scoped).replace("StringLike", "StringLikeIfExists"))
    assert is_allowed([if_exists], head_bucket) and not is_allowed([if_exists], elsewhere)
    deny = {"Statement": [{"Effect": "Deny", "Action": "s3:*", "Resource": f"{arn}*"}]}
    assert not is_allowed([if_exists, deny], listing)  # an explicit Deny wins
    worker = _policies()["worker"]
    put = "s3:PutObject"
    assert is_allowed(worker, Permission(put, f"{arn}/lipsweep/ray_results/e/t/checkpoint_0/x"))
    assert not is_allowed(worker, Permission(put, f"{arn}/lipsweep/ray_results/e/tuner.pkl"))
    assert not is_allowed(worker, Permission("S3:putobject", f"{arn}/lipsweep/data/x.npz"))
    by_ip = {**scoped["Statement"][0], "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}
    with pytest.raises(ValueError, match="not implemented"):  # judged, never silently passed
        is_allowed([{"Statement": [by_ip]}], listing)


# --- Ray Tune's storage -------------------------------------------------------------------------


def _driver_files(staging: Path, trial: str) -> None:
    """What Tune's driver uploads from its staging folder (names as Ray 2.60 writes them)."""
    (staging / trial).mkdir(parents=True)
    (staging / "tuner.pkl").write_bytes(b"tuner")
    (staging / "experiment_state-2026-11-25_12-00-00.json").write_text("{}")
    (staging / "basic-variant-state-2026-11-25_12-00-00.json").write_text("{}")
    for name in ("params.json", "params.pkl", "result.json", "progress.csv"):
        (staging / trial / name).write_text("{}")


def test_tune_storage_calls_pass_the_documented_policies(s3, tmp_path):
    from ray.train import Checkpoint
    from ray.train._internal.storage import (
        StorageContext,
        _delete_fs_path,
        _download_from_fs_path,
        _upload_to_fs_path,
    )

    url, gate = s3
    start = len(gate.calls)
    head, worker = _fs(url, HEAD_KEY), _fs(url, WORKER_KEY)
    # The driver (head): Tuner start = HeadBucket + folder markers + validation marker.
    driver = StorageContext(f"{PREFIX}/ray_results", "exp", storage_filesystem=head)
    trial = "train_trial_0a1b2_00000_0_2026-11-25_12-00-00"
    staging = tmp_path / "driver"
    _driver_files(staging, trial)
    _upload_to_fs_path(str(staging), head, driver.experiment_fs_path)
    # A trial (worker): Tune pickles the driver's context to it; the worker's filesystem
    # resolves the worker's own credentials.
    ckpts = []
    for index in range(3):
        ctx = copy.copy(driver)
        ctx.storage_filesystem, ctx.trial_dir_name = worker, trial
        ctx.current_checkpoint_index = index
        local = tmp_path / f"ckpt{index}"
        local.mkdir()
        (local / "state.safetensors").write_bytes(b"w" * 100)
        ckpts.append(ctx.persist_current_checkpoint(Checkpoint.from_directory(str(local))))
    # num_to_keep: the driver's checkpoint manager deletes the oldest one.
    _delete_fs_path(head, ckpts[0].path)
    # --resume: the driver reads its state and a trial's checkpoint back.
    _download_from_fs_path(head, driver.experiment_fs_path, str(tmp_path / "resume"))
    assert (tmp_path / "resume" / "tuner.pkl").read_bytes() == b"tuner"
    assert (tmp_path / "resume" / trial / "checkpoint_000002" / "state.safetensors").is_file()
    assert not (tmp_path / "resume" / trial / "checkpoint_000000").exists()

    calls = _new_calls(gate, start)
    assert [c for c in calls if not c.allowed] == []
    ops = {(c.principal, c.operation.split()[0], c.permissions[0].action) for c in calls}
    assert ("head", "HEAD", "s3:ListBucket") in ops  # HeadBucket, as pyarrow's create_dir does
    assert ("worker", "HEAD", "s3:ListBucket") in ops
    assert {("worker", "PUT", "s3:PutObject"), ("head", "POST", "s3:DeleteObject")} <= ops


@pytest.mark.parametrize(
    "key",
    [
        "ray_results/exp/tuner.pkl",
        "ray_results/exp/experiment_state-2026-11-25_12-00-00.json",
        "mlflow-artifacts/1/abc/artifacts/model.safetensors",
        "data/cifar100.npz",
    ],
)
def test_a_worker_may_not_write_or_delete_the_drivers_files(s3, key):
    """Neither overwritten nor deleted by a worker (a worker may read them: the Read
    statement grants GetObject and nothing else)."""
    url, gate = s3
    _client(url, ADMIN_KEY).put_object(Bucket=BUCKET, Key=f"lipsweep/{key}", Body=b"driver's")
    start = len(gate.calls)
    worker = _fs(url, WORKER_KEY)
    with pytest.raises(OSError, match="ACCESS_DENIED|AccessDenied"):
        with worker.open_output_stream(f"{PREFIX}/{key}") as f:
            f.write(b"forged")
    with pytest.raises(OSError, match="ACCESS_DENIED|AccessDenied"):
        worker.delete_file(f"{PREFIX}/{key}")
    refused = [c for c in _new_calls(gate, start) if not c.allowed]
    assert [(c.principal, c.permissions[0].action) for c in refused] == [
        ("worker", "s3:PutObject"),
        ("worker", "s3:DeleteObject"),
    ]
    with worker.open_input_stream(f"{PREFIX}/{key}") as f:
        assert f.read() == b"driver's"


# --- MLflow's artifact store (the head's server, --serve-artifacts) ------------------------------


def test_mlflow_artifact_calls_pass_the_head_policy(s3, tmp_path, monkeypatch):
    from mlflow.store.artifact.s3_artifact_repo import S3ArtifactRepository

    url, gate = s3
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", url)
    uri = f"s3://{PREFIX}/mlflow-artifacts/1/0123abcd/artifacts"
    start = len(gate.calls)
    repo = S3ArtifactRepository(uri, access_key_id=HEAD_KEY, secret_access_key=SECRET)
    (tmp_path / "ckpt.safetensors").write_bytes(b"c" * 64)
    plots = tmp_path / "plots"
    plots.mkdir()
    (plots / "front.png").write_bytes(b"png")
    repo.log_artifact(str(tmp_path / "ckpt.safetensors"), "checkpoints")
    repo.log_artifacts(str(plots), "plots")
    assert {f.path for f in repo.list_artifacts()} == {"checkpoints", "plots"}
    (tmp_path / "down").mkdir()
    out = repo.download_artifacts("plots", str(tmp_path / "down"))
    assert (Path(out) / "front.png").read_bytes() == b"png"
    repo.delete_artifacts("plots")
    assert [f.path for f in repo.list_artifacts()] == ["checkpoints"]
    calls = _new_calls(gate, start)
    assert calls and all(c.principal == "head" for c in calls)
    assert [c for c in calls if not c.allowed] == []

    forged = S3ArtifactRepository(uri, access_key_id=WORKER_KEY, secret_access_key=SECRET)
    with pytest.raises(Exception, match="AccessDenied|Access Denied|403"):
        forged.log_artifact(str(tmp_path / "ckpt.safetensors"), "checkpoints")


# --- the prepared dataset (every trial reads it) -------------------------------------------------


def test_a_worker_reads_the_prepared_dataset(s3, tmp_path, monkeypatch):
    from lipsweep.data.remote import MANIFEST_SUFFIX, Manifest, fetch_prepared

    url, gate = s3
    buf = io.BytesIO()
    np.savez(buf, x_train=np.zeros((2, 3, 32, 32), np.uint8), y_train=np.zeros(2, np.int64))
    data = buf.getvalue()
    manifest = Manifest(
        "cifar10", "cifar10.npz", hashlib.sha256(data).hexdigest(), len(data), 10, 2, 0
    )
    admin = _client(url, ADMIN_KEY)
    admin.put_object(Bucket=BUCKET, Key="lipsweep/data/cifar10.npz", Body=data)
    admin.put_object(
        Bucket=BUCKET,
        Key=f"lipsweep/data/cifar10.npz{MANIFEST_SUFFIX}",
        Body=manifest.to_json().encode(),
    )
    for name, value in {
        "AWS_ACCESS_KEY_ID": WORKER_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": url,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
        "LIPSWEEP_DATA_CACHE": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    start = len(gate.calls)
    path = fetch_prepared(f"s3://{PREFIX}/data/cifar10.npz", "cifar10")
    assert path.read_bytes() == data
    calls = _new_calls(gate, start)
    assert calls and {c.principal for c in calls} == {"worker"}
    assert [c for c in calls if not c.allowed] == []
    assert re.search(r"cifar10\.npz$", calls[-1].operation)


# --- a real Tune run: the call list above is the one Tune makes -----------------------------------


@pytest.fixture
def ray_auth_disabled():
    """``RAY_AUTH_MODE=disabled`` for a local Ray started in this process, as this process sees
    it too, and the mode as it was afterwards.

    Ray reads the mode into its config once (``Config.initialize``); changing the variable
    alone leaves a driver in token mode whose Ray processes (started with the variable) are
    not, and the trial actor dies before it starts (``ActorDiedError``, "cancelled before it
    started running"). That happened in CI, where an earlier test had left token mode behind,
    and happens wherever ``RAY_AUTH_MODE=token`` is exported (deploy/README's environment)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    def refresh() -> None:
        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()

    saved = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    refresh()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = saved
        refresh()


@pytest.mark.usefixtures("ray_in_this_process")
@pytest.mark.slow
def test_a_real_tune_run_passes_the_policies(s3, tmp_path, monkeypatch, ray_auth_disabled):
    """Tuner.fit on S3 storage: the driver as the head, its trial actor as a worker (AWS
    profiles: Tune copies a driver's AWS_ACCESS_KEY_ID into its trials, a profile it does not),
    checkpoints past num_to_keep deleted; no request refused, both identities seen."""
    import ray
    from ray import tune

    # defined here, so that cloudpickle ships it by value (the workers cannot import tests/)
    def _tune_trainable(config):
        import os
        import tempfile

        from ray import tune

        for i in range(3):
            with tempfile.TemporaryDirectory() as d:
                with open(os.path.join(d, "state.safetensors"), "wb") as f:
                    f.write(b"w" * 100)
                tune.report({"acc": float(i)}, checkpoint=tune.Checkpoint.from_directory(d))

    url, gate = s3
    creds = tmp_path / "credentials"
    creds.write_text(
        f"[head]\naws_access_key_id = {HEAD_KEY}\naws_secret_access_key = {SECRET}\n"
        f"[worker]\naws_access_key_id = {WORKER_KEY}\naws_secret_access_key = {SECRET}\n"
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "AWS_SHARED_CREDENTIALS_FILE": str(creds),
        "AWS_PROFILE": "head",
        "AWS_ENDPOINT_URL": url,
        "AWS_REGION": REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    start = len(gate.calls)
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        runtime_env={"env_vars": {"AWS_PROFILE": "worker"}},
    )
    try:
        result = tune.Tuner(
            _tune_trainable,
            run_config=tune.RunConfig(
                name="real",
                storage_path=f"s3://{PREFIX}/ray_results",
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                verbose=0,
            ),
        ).fit()
    finally:
        ray.shutdown()
    assert not result.errors and result[0].checkpoint is not None
    calls = _new_calls(gate, start)
    assert [c for c in calls if not c.allowed] == []
    by = {p: [c.operation for c in calls if c.principal == p] for p in ("head", "worker")}
    assert any(op.endswith("/tuner.pkl") for op in by["head"])
    assert any("/checkpoint_000002/" in op for op in by["worker"])
    assert any(op.startswith("POST") and op.endswith(BUCKET) for op in by["head"])  # deletion
