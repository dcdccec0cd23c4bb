"""Helpers for tests that run real sweeps: tiny spaces, the CLI, MLflow reads, process hygiene.

The machine is shared: other engineers run their own Ray clusters on it. Everything here is
scoped to the processes a test started itself: each sweep gets its own ``RAY_TMPDIR`` (so its
Ray cluster is separate and recognisable), and processes are found and killed by walking the
process tree below the test's own subprocess, never by name across the machine.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

ROOT = Path(__file__).resolve().parents[1]

# A tiny, fast trial: 2-block ViT, 256 training images, 32 evaluation images; every Lipschitz
# metric, but the per-head bounds on 4 images (not 16) and no PNG figures, which were 2/3 of
# the Lipschitz summary's time (tests/test_lipschitz_summary.py draws every figure).
TINY_FLAT = {
    "model": "vit_tiny_patch16_224",
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 4,
    "dataset": "embedded",
    "train_size": 256,
    "eval_size": 32,
    "batch_size": 64,
    "optimizer": "adamw",
    "lr": 1e-3,
    "aa_attacks": ["apgd-ce"],
    "lip_head_images": 4,
    "lip_figures": False,
}

NONE = {"regularizer": "none"}
JASMIN_MEAN = {"regularizer": "jasmin", "k": 0, "lam": 1e-2, "aggregation": "mean"}
# Every regularizer of the package (JaSMin with both aggregations): the grid of the session's
# four-trial sweep (conftest.four_trial_sweep) and of the interrupted sweep in test_sweep.py.
FOUR = [
    NONE,
    JASMIN_MEAN,
    {"regularizer": "jasmin", "k": 10, "lam": 1e-2, "aggregation": "max"},
    {"regularizer": "specformer", "lam_q": 1e-2, "lam_k": 1e-2, "lam_v": 1e-2},
]


def sha256_of(path: Path) -> str:
    """The SHA-256 of the file at ``path`` (hex)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tiny_space(
    grid: Optional[list[dict[str, Any]]],
    epochs: int = 2,
    max_concurrent: int = 2,
    fixed: Optional[dict[str, Any]] = None,
    **top: Any,
) -> dict[str, Any]:
    """A search space (what ``load_space`` reads) of the tiny trial: ``fixed`` over
    :data:`TINY_FLAT` with ``epochs``, the ``grid`` (None: give a ``search`` instead), one CPU
    per trial, ``max_concurrent`` trials at once, and any other top-level key (``repeat``,
    ``search``, ``scheduler``, ``max_failures``, ``callbacks``...)."""
    spec: dict[str, Any] = {"name": "t", "fixed": {**TINY_FLAT, "epochs": epochs, **(fixed or {})}}
    if grid is not None:
        spec["grid"] = [dict(point) for point in grid]
    return {
        **spec,
        "resources": {"cpu": 1, "gpu": 0},
        "max_concurrent_trials": max_concurrent,
        **top,
    }


def space_file(folder: Path, spec: dict[str, Any] | str, name: str = "space.yaml") -> Path:
    """``spec`` (a space as Python data, or YAML text as written) as ``folder/name``."""
    import yaml

    path = folder / name
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False))
    return path


def write_space(
    tmp_path: Path,
    grid: Optional[list[dict[str, Any]]],
    epochs: int = 2,
    max_concurrent: int = 2,
    fixed: Optional[dict[str, Any]] = None,
    **top: Any,
) -> Path:
    """:func:`tiny_space` as ``tmp_path/space.yaml``."""
    return space_file(tmp_path, tiny_space(grid, epochs, max_concurrent, fixed, **top))


def _fixed_yaml() -> str:
    import yaml

    text = yaml.safe_dump({"fixed": {**TINY_FLAT, "epochs": -1}}, sort_keys=False)
    return text.replace("epochs: -1", "epochs: {epochs}")


FIXED = _fixed_yaml()
""":data:`TINY_FLAT`'s ``fixed:`` block as YAML text with an ``{epochs}`` field, for a test
that writes its space as text."""


def sqlite_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


_EMPTY_STORE: list[Path] = []  # the empty store this process copies (made on first use)


def empty_store(db: Path) -> str:
    """The URI of a new, empty MLflow SQLite store at ``db``: a copy of one store this test
    process made once. MLflow makes a store's schema by running its Alembic migrations, 3-8 s
    on 2 cores; a copy opens in 0.1 s. For tests where making the store is not what they test:
    the driver making its own (under lipsweep's schema lock) is still what the sweep tests
    that use :func:`sqlite_uri` alone exercise."""
    if not _EMPTY_STORE:
        from mlflow.tracking import MlflowClient

        folder = Path(tempfile.mkdtemp(prefix="lsdb"))
        atexit.register(shutil.rmtree, folder, True)
        MlflowClient(tracking_uri=f"sqlite:///{folder / 'empty.db'}").search_experiments()
        _EMPTY_STORE.append(folder / "empty.db")
    db.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_EMPTY_STORE[0], db)
    return f"sqlite:///{db}"


def sweep_cmd(
    tmp_path: Path, space: Path, *extra: str, tracking_uri: Optional[str] = None
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lipsweep",
        "sweep",
        str(space),
        "--experiment",
        "exp",
        "--storage",
        str(tmp_path / "ray_results"),
        "--num-cpus",
        "2",
        "--tracking-uri",
        tracking_uri or sqlite_uri(tmp_path),
        *extra,
    ]


def client(tracking_uri: str, experiment: str = "exp"):
    """lipsweep's one read API on ``experiment`` (tests read MLflow through it)."""
    from lipsweep.tracking import TrackingReader

    return TrackingReader(tracking_uri, experiment)


def mlflow_client(tracking_uri: str):
    """A raw ``MlflowClient``, only to write the fixture stores tests build themselves."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def runs(tracking_uri: str, experiment: str = "exp") -> list:
    return client(tracking_uri, experiment).runs()


def children(tracking_uri: str) -> list:
    return [r for r in runs(tracking_uri) if r.data.tags.get("lipsweep.kind") == "trial"]


def parents(tracking_uri: str) -> list:
    return [r for r in runs(tracking_uri) if r.data.tags.get("lipsweep.kind") == "sweep"]


def steps(tracking_uri: str, run_id: str, key: str = "epoch") -> list[int]:
    return [m.step for m in client(tracking_uri).get_metric_history(run_id, key)]


def epochs_logged(tracking_uri: str) -> int:
    """Epoch results logged across all child runs (0 while the store does not exist yet)."""
    try:
        return sum(len(steps(tracking_uri, r.info.run_id)) for r in children(tracking_uri))
    except Exception:  # noqa: BLE001 - the store or experiment may not exist yet
        return 0


def wait_for(
    pred: Callable[[], bool],
    timeout: float,
    what: str,
    proc: Optional[subprocess.Popen] = None,
    poll_s: float = 1.0,
) -> None:
    """Poll ``pred``; fail if it takes too long or ``proc`` exits first."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited ({proc.returncode}) before {what}")
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


# -- processes --------------------------------------------------------------------------------
def _ppid_map() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # comm may contain spaces and parentheses: the ppid follows the last ')'
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = int(fields[1])
    return out


def cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def environ_has(pid: int, needle: str) -> bool:
    try:
        return needle.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    ppid = _ppid_map()
    kids: dict[int, list[int]] = {}
    for p, pp in ppid.items():
        kids.setdefault(pp, []).append(p)
    out, todo = [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def processes_with_env(needle: str) -> list[int]:
    """Live processes whose environment contains ``needle`` (e.g. this test's RAY_TMPDIR)."""
    me = os.getpid()
    return [
        int(e)
        for e in os.listdir("/proc")
        if e.isdigit() and int(e) != me and environ_has(int(e), needle)
    ]


def kill_pids(pids: list[int], sig: int = signal.SIGKILL) -> int:
    n = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            n += 1
        except ProcessLookupError:
            pass
    return n


def trial_workers(driver_pid: int) -> list[int]:
    """This sweep's Tune trial workers: ``ray::ImplicitFunc`` processes below its driver."""
    return [p for p in descendants(driver_pid) if cmdline(p).startswith("ray::ImplicitFunc")]


class RaySandbox:
    """A private ``RAY_TMPDIR`` for one test's sweeps, and the cleanup of what they leave.

    Short path on purpose: Ray puts Unix sockets under it (108-byte limit).
    """

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="lsf", dir="/tmp")
        self.tag = f"RAY_TMPDIR={self.dir}"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(
            os.environ,
            RAY_TMPDIR=self.dir,
            RAY_USAGE_STATS_ENABLED="0",
            PYTHONUNBUFFERED="1",
            # Ray's setproctitle would overwrite the start of the environment block of its
            # agents and workers, hiding RAY_TMPDIR from leftovers() in some runs and not others
            # (lipsweep's own LocalRay.mark sets it too; here it holds for any code under test)
            SPT_NOENV="1",
            **extra,
        )
        env.pop("RAY_ADDRESS", None)
        return env

    def leftovers(self) -> list[int]:
        """Processes still running with this sandbox's RAY_TMPDIR in their environment."""
        return processes_with_env(self.tag)

    def cleanup(self) -> list[int]:
        """SIGKILL every process of this sandbox (and only those); returns what was left."""
        left = self.leftovers()
        kill_pids(left)
        deadline = time.time() + 20
        while self.leftovers() and time.time() < deadline:
            time.sleep(0.5)
        shutil.rmtree(self.dir, ignore_errors=True)
        return left


@contextmanager
def ray_sandbox() -> Iterator[RaySandbox]:
    box = RaySandbox()
    try:
        yield box
    finally:
        box.cleanup()


@contextmanager
def sweep_process(
    cmd: list[str], cwd: Path, box: RaySandbox, log: Path, own_group: bool = False
) -> Iterator[subprocess.Popen]:
    """A sweep running in the background, output to ``log`` (a file: a full pipe would block);
    killed on the way out if the test left it running. ``own_group``: in a process group of
    its own, as a shell runs a job (``os.killpg(proc.pid, sig)`` then signals that job)."""
    with open(log, "ab") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=box.env(),
            stdout=fh,
            stderr=subprocess.STDOUT,
            process_group=0 if own_group else None,
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_sweep_cli(
    cmd: list[str], cwd: Path, box: RaySandbox, timeout: float = 1200
) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=box.env(), capture_output=True, text=True, timeout=timeout
    )


# -- an MLflow tracking server ------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1 with a SQLite store and artifacts in ``root``."""

    def __init__(self, root: Path, port: Optional[int] = None) -> None:
        self.root = root
        self.port = port or free_port()
        self.proc: Optional[subprocess.Popen] = None
        self.log = root / "mlflow_server.log"

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> None:
        import urllib.request

        if not (self.root / "server.db").exists():
            empty_store(self.root / "server.db")  # the server's own first start: migrations
        fh = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'server.db'}",
                "--artifacts-destination",
                str(self.root / "server_artifacts"),
            ],
            cwd=self.root,
            # MLflow's job runner (GenAI scorer jobs, which lipsweep never submits) is 8 more
            # processes that import MLflow: 28 instead of 12 CPU-seconds per start
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fh.close()
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"mlflow server did not come up: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Kill the server and its workers (its own process group, started by us)."""
        if self.proc is None:
            return
        pids = [self.proc.pid, *descendants(self.proc.pid)]
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        kill_pids(pids)
        self.proc.wait(timeout=30)
        self.proc = None
        t0 = time.time()  # the port must be free before a restart on it
        while time.time() - t0 < 30:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.2)


def npz_space(tmp_path: Path, name: str, epochs: int = 1, **rest: Any) -> Path:
    """The smallest sweep there is: a 2-block ViT on conftest's 20/10-image npz, ``epochs``
    epochs, then ``rest`` (``grid``, ``search``, ``scheduler``, ``resources``... as Python)."""
    from conftest import small_npz

    data = small_npz(tmp_path / "data.npz")
    fixed = {
        "model": "vit_tiny_patch16_224",
        "depth": 2,
        "embed_dim": 64,
        "num_heads": 4,
        "dataset": "npz",
        "data_dir": str(data),
        "epochs": epochs,
        "batch_size": 10,
        "optimizer": "adamw",
        "lr": 1e-3,
        "aa_attacks": ["apgd-ce"],
    }
    return space_file(tmp_path, {"name": name, "fixed": fixed, **rest})


def sweep_in_process(monkeypatch, tmp_path: Path, **options):
    """``lipsweep.api.sweep(**options)`` in this process on 2 CPUs: a local Ray of its own
    (RAY_TMPDIR), the workers importing this checkout, and Ray's auth mode put back after."""
    import ray
    from ray._private.authentication.authentication_token_setup import (
        AuthenticationTokenLoader,
    )
    from ray._raylet import Config

    from lipsweep import api

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN"):  # the sweep sets its own token
        monkeypatch.delenv(key, raising=False)
    with ray_sandbox() as box:
        monkeypatch.setenv("RAY_TMPDIR", box.dir)
        monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the workers import this checkout
        try:
            return api.sweep(storage=str(tmp_path / "ray_results"), num_cpus=2, **options)
        finally:
            ray.shutdown()
            monkeypatch.undo()  # later tests in this process see Ray's auth mode as it was
            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()


def import_blocker(*heavy: str) -> str:
    """The start of a ``python -c`` program that refuses (and records in ``tried``) every import
    of the packages ``heavy``: an import that some ``try`` swallows still shows, and the
    program's traceback on stderr names who imported it. End the program with
    ``assert not tried``."""
    return f"""
import sys
HEAVY = {tuple(heavy)!r}
tried = []
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            tried.append(name)
            raise ImportError("blocked import of " + name)
sys.meta_path.insert(0, _Block())
"""


def stub_trial(root: Path, config: Optional[dict[str, Any]] = None):
    """A real Tune ``Trial`` with its ``StorageContext`` under ``root`` and a checkpoint
    manager (``num_to_keep`` 2), as ``TuneController.add_trial`` leaves it; a stub (no
    trainable registered): nothing runs."""
    from ray.train._internal.storage import StorageContext
    from ray.tune import CheckpointConfig, PlacementGroupFactory
    from ray.tune.experiment import Trial

    storage = StorageContext(
        storage_path=str(root / "ray_results"), experiment_dir_name="exp", trial_dir_name="t0"
    )
    trial = Trial(
        "train_trial",
        config=dict(config or {}),
        trial_id="abc_00000",
        storage=storage,
        checkpoint_config=CheckpointConfig(num_to_keep=2),
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
        stub=True,
    )
    trial.create_placement_group_factory()  # as TuneController.add_trial does
    return trial


def finished_trials_store(folder: Path, trials: list[tuple[dict, dict]]) -> tuple[str, list[str]]:
    """A real MLflow SQLite store in ``folder``, experiment ``x``: a parent sweep run and
    ``trials`` (params, metrics) as FINISHED trial runs; returns (uri, [run ids])."""
    from mlflow.tracking import MlflowClient

    uri = empty_store(folder / "mlflow.db")
    c = MlflowClient(uri)
    exp = c.create_experiment("x", artifact_location=(folder / "artifacts").as_uri())
    parent = c.create_run(exp, tags={"lipsweep.kind": "sweep"}).info.run_id
    ids = []
    for i, (params, metrics) in enumerate(trials):
        rid = c.create_run(
            exp, run_name=f"t{i}", tags={"lipsweep.kind": "trial", "mlflow.parentRunId": parent}
        ).info.run_id
        for k, v in params.items():
            c.log_param(rid, k, v)
        for k, v in metrics.items():
            c.log_metric(rid, k, v)
        c.set_terminated(rid, "FINISHED")
        ids.append(rid)
    return uri, ids


def lipsweep_cli(cwd: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m lipsweep ARGV`` in ``cwd``; with ``check``, exit status 0 is asserted."""
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
