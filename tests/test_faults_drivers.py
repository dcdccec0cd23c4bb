"""Adversarial drivers and URIs.

Two drivers on one experiment, credentials in a tracking URI, a bind address that means "every
interface", read commands on a bad store, options checked before anything is written.
Real MLflow (SQLite in the test folder), real Ray for the one sweep; nothing is mocked.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from _sweep_helpers import (
    NONE,
    ROOT,
    TINY_FLAT,
    children,
    client,
    empty_store,
    mlflow_client,
    parents,
    ray_sandbox,
    sqlite_uri,
    sweep_cmd,
    write_space,
)

pytestmark = [pytest.mark.faults, pytest.mark.ray]

SECRET = "hunter2"
MLFLOW_SH = ROOT / "deploy" / "start_mlflow.sh"


def _cli(
    cwd: Path, *argv: str, timeout: float = 180, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "lipsweep", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_error_line(proc: subprocess.CompletedProcess, needle: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ": error: " in ln]
    assert len(errors) == 1 and needle in errors[0], proc.stderr[-3000:]
    return errors[0]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _store(tmp_path: Path, experiment: str | None = None) -> str:
    uri = empty_store(tmp_path / "mlflow.db")
    c = mlflow_client(uri)
    if experiment:
        c.create_experiment(experiment)
    else:
        c.search_experiments()
    return uri


# -- one driver per experiment ---------------------------------------------------------------------
@pytest.mark.slow
def test_two_drivers_started_together_one_runs_the_other_exits_2(tmp_path):
    """Same --experiment, --storage and fresh SQLite store, started at once: exactly one runs,
    the other exits 2 naming the lock's holder; the 1-trial sweep has one parent, one child."""
    space = write_space(tmp_path, [NONE], epochs=1, max_concurrent=1)
    uri = sqlite_uri(tmp_path)
    with ray_sandbox() as box:
        procs = [
            subprocess.Popen(
                sweep_cmd(tmp_path, space, "--num-cpus", "1"),
                cwd=tmp_path,
                env=box.env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        try:
            outs = [p.communicate(timeout=900) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], "\n\n".join(
        f"rc={p.returncode}\n{o[0][-2000:]}\n{o[1][-5000:]}" for p, o in zip(procs, outs)
    )
    loser = next(o for p, o in zip(procs, outs) if p.returncode == 2)
    line = _one_error_line(subprocess.CompletedProcess([], 2, *loser), "--experiment exp")
    assert f"host {socket.gethostname()}, pid " in line and ", since " in line, line
    winner = next(o for p, o in zip(procs, outs) if p.returncode == 0)
    assert "1 finished, 0 stopped early, 0 failed, 0 not run, of 1 trials" in winner[0], winner[0][
        -1500:
    ]
    (parent,) = parents(uri)
    (kid,) = children(uri)
    assert parent.info.status == "FINISHED" and kid.info.status == "FINISHED"
    assert kid.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert parent.data.tags["lipsweep.owner"].split()[0] == socket.gethostname()


def test_a_held_experiment_lock_refuses_a_second_driver_before_any_write(tmp_path):
    """A live holder (even on --resume): exit 2 naming host, pid and since; no store made."""
    from lipsweep.sweep.driver import SweepLock, owner_id

    space = write_space(tmp_path, [NONE], epochs=1)
    storage = tmp_path / "ray_results"
    (storage / "exp").mkdir(parents=True)  # an interrupted sweep, as --resume expects
    lock = SweepLock(str(storage), "exp", owner_id())
    try:
        before = _files(tmp_path)
        proc = _cli(tmp_path, *sweep_cmd(tmp_path, space, "--resume")[3:])
    finally:
        lock.release()
    line = _one_error_line(proc, "--experiment exp: this sweep is being run by host ")
    assert f"pid {os.getpid()}, since " in line
    assert _files(tmp_path) == before  # no mlflow.db, nothing under ray_results


def test_parent_run_is_adopted_only_with_resume_and_only_from_a_gone_owner(tmp_path):
    """Remote storage has no file lock: the parent run's owner/heartbeat tags decide."""
    from lipsweep.sweep.driver import _adoption_policy
    from lipsweep.tracking import TAG_HEARTBEAT, TAG_OWNER, SweepBusy, Tracker

    uri = empty_store(tmp_path / "mlflow.db")
    host = socket.gethostname()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        first = Tracker(uri, "exp")
        rid = first.open_parent("s3://b/exp", "exp", {}, owner=f"{host} {live.pid} T0")

        second = Tracker(uri, "exp")
        with pytest.raises(SweepBusy, match="pass --resume"):
            second.open_parent("s3://b/exp", "exp", {}, owner="x", adopt=_adoption_policy(False))
        with pytest.raises(SweepBusy, match=f"host {host}, pid {live.pid}, since T0"):
            second.open_parent("s3://b/exp", "exp", {}, owner="x", adopt=_adoption_policy(True))
        first.set_tags(rid, {TAG_OWNER: f"{host} {dead.pid} T0"})  # owner died
        assert (
            second.open_parent(
                "s3://b/exp", "exp", {}, owner=f"{host} 7 T2", adopt=_adoption_policy(True)
            )
            == rid
        )
        other = {TAG_OWNER: "otherhost 5 T3", TAG_HEARTBEAT: f"{time.time():.0f}"}
        first.set_tags(rid, other)  # fresh heartbeat
        with pytest.raises(SweepBusy, match="host otherhost, pid 5"):
            second.open_parent("s3://b/exp", "exp", {}, owner="x", adopt=_adoption_policy(True))
        first.set_tags(rid, {TAG_HEARTBEAT: f"{time.time() - 3600:.0f}"})  # stale heartbeat
        assert (
            second.open_parent("s3://b/exp", "exp", {}, owner="x", adopt=_adoption_policy(True))
            == rid
        )
        assert client(uri).get_run(rid).data.tags[TAG_OWNER] == "x"
    finally:
        live.kill()
        live.wait()


def test_two_new_parents_for_one_sweep_the_later_one_backs_off(tmp_path):
    """Two remote drivers that both found no parent: MLflow keeps the first, the other
    deletes its own parent run and raises."""
    from lipsweep.tracking import TAG_KIND, TAG_OWNER, TAG_SWEEP_DIR, SweepBusy, Tracker

    uri = empty_store(tmp_path / "mlflow.db")
    tracker = Tracker(uri, "exp")
    tags = {TAG_KIND: "sweep", TAG_SWEEP_DIR: "s3://b/exp"}
    a = tracker.create_run(None, {**tags, TAG_OWNER: "h 1 T"})
    time.sleep(0.01)
    b = tracker.create_run(None, tags)
    with pytest.raises(SweepBusy, match="host h, pid 1, since T|h 1 T"):
        tracker._check_sole_parent("s3://b/exp", b)
    tracker._check_sole_parent("s3://b/exp", a)  # the first one stays
    assert [r.info.run_id for r in parents(uri)] == [a]


def test_sqlite_schema_is_created_under_a_file_lock(tmp_path):
    """Two fresh drivers on one SQLite store would race on `duplicate column name`; the schema
    is made while holding ``<db>.lock``. With the test holding it, a driver's tracker must
    queue for it (a waiter in /proc/locks) and create nothing until it is released."""
    from lipsweep.tracking import Tracker

    db = tmp_path / "mlflow.db"
    lock_file = tmp_path / "mlflow.db.lock"
    holder = open(lock_file, "a")
    fcntl.flock(holder, fcntl.LOCK_EX)
    inode = os.stat(lock_file).st_ino
    tracker = Tracker(sqlite_uri(tmp_path), "exp", buffer_writes=True)
    t = threading.Thread(target=tracker.existing_experiment_id, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 120
        while True:
            assert not db.exists(), "the store was created while another process held the lock"
            waiters = [
                ln
                for ln in Path("/proc/locks").read_text().splitlines()
                if "->" in ln and re.search(rf":{inode}\b", ln)
            ]
            if waiters:
                break
            assert time.monotonic() < deadline and t.is_alive(), "no wait on <db>.lock"
            time.sleep(0.05)
    finally:
        holder.close()
    t.join(120)
    assert not t.is_alive() and db.is_file()


# -- no credential shown or stored -----------------------------------------------------------------
def test_credentials_in_the_tracking_uri_are_never_shown_or_stored(tmp_path):
    from lipsweep.decide.sweep_runs import export_run
    from lipsweep.tracking import Tracker, TrackingError, redact_uri

    assert redact_uri(f"http://alice:{SECRET}@h:5000/x") == "http://***@h:5000/x"
    assert (
        redact_uri(f"see postgresql://u:{SECRET}@db/m and sqlite:////a@b")
        == "see postgresql://***@db/m and sqlite:////a@b"
    )
    # logs and error lines of the commands (sweep refuses before writing; pareto cannot connect)
    space = write_space(tmp_path, [NONE], epochs=1)
    for argv in (
        ["sweep", str(space), "--tracking-uri", f"postgresql://u:{SECRET}@h/db"],
        ["pareto", "--experiment", "e", "--tracking-uri", f"http://alice:{SECRET}@127.0.0.1:1"],
    ):
        proc = _cli(tmp_path, *argv)
        _one_error_line(proc, "--tracking-uri ")
        assert SECRET not in proc.stdout + proc.stderr, proc.stderr
    # a TrackingError and Tune's pickled copy of the tracker
    with pytest.raises(TrackingError) as err:
        Tracker(f"http://alice:{SECRET}@127.0.0.1:1", "e", retries=0).existing_experiment_id()
    assert SECRET not in str(err.value) and "***@127.0.0.1:1" in str(err.value)
    assert SECRET.encode() not in pickle.dumps(Tracker(f"https://a:{SECRET}@h", "e"))
    # the export's config.json and model card: a real run with a real checkpoint artifact
    import torch
    from safetensors.torch import save_file

    from lipsweep.settings.config import TrialConfig
    from lipsweep.vit.models import create_model

    cfg = TrialConfig.from_flat(dict(TINY_FLAT))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    torch.manual_seed(0)
    save_file(create_model(cfg.model).state_dict(), str(ckpt / "model.safetensors"))
    (ckpt / "config.json").write_text(json.dumps(cfg.to_flat()))
    uri = _store(tmp_path, "e")
    c = mlflow_client(uri)
    run = c.create_run(c.get_experiment_by_name("e").experiment_id)
    c.log_artifacts(run.info.run_id, str(ckpt), "checkpoint")
    c.log_metric(run.info.run_id, "acc_clean", 50.0)
    c.set_terminated(run.info.run_id)
    tracker = Tracker(f"https://alice:{SECRET}@mlflow.example:5000", "e")
    tracker._client = c  # the same real store, reached under a URI that carries a password
    out = export_run(tracker, run.info.run_id, tmp_path / "export", selected_by="test")
    text = "".join(
        p.read_text(errors="replace")
        for p in out.rglob("*")
        if p.is_file() and p.suffix in (".json", ".md", ".txt")
    )
    assert "mlflow.example" in text and SECRET not in text and "alice" not in text


# -- the MLflow server's bind address --------------------------------------------------------------
@pytest.mark.parametrize(
    "host",
    ["0", "::0", "0:0:0:0:0:0:0:0", "0.0.0.0", "::", "[::]", "0x0", "::ffff:0.0.0.0", "8.8.8.8"],
)
def test_start_mlflow_refuses_every_interface_and_public_addresses(tmp_path, host):
    proc = subprocess.run(
        ["bash", str(MLFLOW_SH), "status"],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(tmp_path), "LIPSWEEP_MLFLOW_HOST": host},
        timeout=60,
    )
    assert proc.returncode == 2 and "refusing to bind" in proc.stderr, proc.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "10.1.2.3", "192.168.0.7"])
def test_start_mlflow_accepts_loopback_and_private(tmp_path, host):
    proc = subprocess.run(
        ["bash", str(MLFLOW_SH), "status"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "HOME": str(tmp_path),
            "LIPSWEEP_MLFLOW_PORT": "1",
            "LIPSWEEP_MLFLOW_HOST": host,
        },
        timeout=60,
    )
    assert proc.returncode == 1 and "not running" in proc.stdout, proc.stderr


def test_start_mlflow_offers_basic_auth():
    text = MLFLOW_SH.read_text()
    assert "--app-name basic-auth" in text and "LIPSWEEP_MLFLOW_AUTH" in text
    assert "Trust boundary" in text


# -- read commands on a bad store ------------------------------------------------------------------
TIMED = (
    "import sys, time; from lipsweep.__main__ import main; t = time.monotonic(); "
    "rc = main(sys.argv[1:]); print(f'ELAPSED {time.monotonic() - t:.1f}'); sys.exit(rc)"
)


@pytest.mark.parametrize(
    "uri,needle",
    [
        ("http://127.0.0.1:1", "Connection refused"),
        ("file:{tmp}/mlruns", "not supported"),
        ("postgresql://127.0.0.1/db", "driver not usable"),
        ("bogus://x", "scheme 'bogus' is not supported"),
        ("sqlite:///{tmp}/typo.db", "no MLflow store at"),
    ],
)
@pytest.mark.parametrize("command", ["pareto", "export"])
def test_read_commands_fail_fast_with_one_line_and_create_nothing(tmp_path, uri, needle, command):
    uri = uri.format(tmp=tmp_path)
    argv = [command, "--experiment", "e", "--tracking-uri", uri]
    if command == "export":
        argv += ["--out", str(tmp_path / "out")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    before = _files(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-c", TIMED, *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    line = _one_error_line(proc, f"--tracking-uri {uri}")
    assert needle in line, line
    assert float(proc.stdout.split("ELAPSED")[1]) < 30, proc.stdout
    assert _files(tmp_path) == before


def test_read_commands_never_create_an_experiment(tmp_path):
    uri = _store(tmp_path)
    before = _files(tmp_path)
    for argv in (["pareto"], ["export", "--out", str(tmp_path / "out")]):
        proc = _cli(tmp_path, *argv, "--experiment", "nope", "--tracking-uri", uri)
        _one_error_line(proc, "--experiment nope: no experiment 'nope'")
    assert client(uri).experiment_names() == ["Default"]
    assert _files(tmp_path) == before


# -- every option checked before any write ---------------------------------------------------------
@pytest.mark.parametrize(
    "extra,flag",
    [
        (["--num-cpus", "-1"], "--num-cpus"),
        (["--num-cpus", "0"], "--num-cpus"),
        (["--experiment", "../escape"], "--experiment"),
        (["--experiment", "a/b"], "--experiment"),
        (["--experiment", "/abs"], "--experiment"),
        (["--experiment", "it's"], "--experiment"),
        (["--storage", "{tmp}/it's"], "--storage"),
        (["--storage", '{tmp}/say"hi'], "--storage"),
        (["--tracking-uri", "sqlite:///{tmp}/no/such/folder/m.db"], "--tracking-uri"),
        (["--ray-address", "nonsense"], "--ray-address"),
        (["--ray-address", "127.0.0.1:1"], "--ray-address"),
    ],
)
def test_sweep_options_are_checked_before_any_write(tmp_path, extra, flag):
    space = write_space(tmp_path, [NONE], epochs=1)
    extra = [e.format(tmp=tmp_path) for e in extra]
    argv = [
        "sweep",
        str(space),
        "--experiment",
        "exp",
        "--storage",
        str(tmp_path / "ray_results"),
        "--tracking-uri",
        sqlite_uri(tmp_path),
        *extra,
    ]
    before = _files(tmp_path)
    with ray_sandbox() as box:
        proc = _cli(tmp_path, *argv, env=box.env(), timeout=120)
    _one_error_line(proc, f"error: {flag}")
    assert _files(tmp_path) == before  # no mlflow.db (so no RUNNING parent), no storage


# -- the storage trust boundary --------------------------------------------------------------------
def test_worker_policy_cannot_write_the_drivers_experiment_state():
    """The workers' IAM policy in deploy/README.md may write trial folders
    (<storage>/<experiment>/<trial>/...) but not the driver's state beside them
    (<storage>/<experiment>/tuner.pkl, experiment_state-*.json), which --resume unpickles."""
    import fnmatch

    text = (ROOT / "deploy" / "README.md").read_text()
    policy = json.loads(re.search(r"```json\n(.*?)```", text, re.S).group(1))
    writes = [
        r
        for s in policy["Statement"]
        if s["Effect"] == "Allow"
        and any(a in ("s3:PutObject", "s3:DeleteObject", "s3:*") for a in s["Action"])
        for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
    ]
    assert writes

    def writable(key: str) -> bool:  # IAM wildcards: '*' matches any run, '/' included
        return any(fnmatch.fnmatchcase(f"arn:aws:s3:::YOUR-BUCKET/{key}", r) for r in writes)

    exp = "lipsweep/ray_results/paper"
    assert writable(f"{exp}/train_trial_1a2b3_00000_0/checkpoint_000003/model.safetensors")
    for key in (
        "tuner.pkl",
        "trainable.pkl",
        "experiment_state-2026-11-23_04-00-00.json",
        "basic-variant-state-2026-11-23_04-00-00.json",
        "search_gen_state-2026-11-23_04-00-00.json",
    ):
        assert not writable(f"{exp}/{key}"), key
    doc = " ".join((ROOT / "docs" / "reliability.md").read_text().split())
    assert "Trust boundary" in doc and "code execution on the driver" in doc
