"""Shared fixtures: the embedded CIFAR-10 sample, a briefly trained tiny ViT and one finished
four-trial sweep; and a private Ray temp dir for the session, removed at its end."""

from __future__ import annotations

import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from _amx_fault import install_if_asked
from _signals import (
    WATCHED,
    changes,
    python_defaults,
    set_signal_state,
    signal_state,
    signals_kept,
)
from hypothesis import settings

from lipsweep.vit.models import ModelConfig, PixelModel, create_model

ROOT = Path(__file__).resolve().parents[1]
SHARED_NPZ = ROOT.parent / "shared" / "data" / "cifar10_subset.npz"
EMBEDDED_NPZ = ROOT / "lipsweep" / "data" / "cifar10_sample.npz"

# `make test` runs two pytest-xdist workers on CI's two cores: one torch thread each (two each
# oversubscribed the cores), two in a single-process run.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
install_if_asked()  # LIPSWEEP_TEST_AMX_FAULT=1: CPU flash attention fails in bf16 (_amx_fault.py)
torch.set_num_threads(int(os.environ.get("LIPSWEEP_TEST_THREADS", "1" if _XDIST_WORKER else "2")))

# Property tests: in CI (CI set, as .ci/run does) Hypothesis draws the same examples on every
# run (derandomize: a failure reproduces, never "fails by chance") and keeps no database; a
# local run draws fresh examples, keeps the ones that failed in .hypothesis/ and prints the
# blob to reproduce one. Regressions it found are pinned with @example.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

# Every local Ray the tests start (in this process or in a sweep subprocess) keeps its session
# (logs, object spill, sockets) here, not in the shared /tmp/ray, which grew by 423 MB per run.
# Short on purpose: Ray's Unix socket paths live under it (108-byte limit). A test that sets
# its own RAY_TMPDIR (tests/_sweep_helpers.RaySandbox) keeps it. Made in pytest_configure, not
# at import: a Ray worker that imports a test module (and so this file) made one it never removed.
_RAY_TMPDIR = ""


def pytest_configure(config) -> None:
    global _RAY_TMPDIR
    _RAY_TMPDIR = tempfile.mkdtemp(prefix="lsr", dir="/tmp")
    os.environ["RAY_TMPDIR"] = _RAY_TMPDIR
    _default_signals()


def _default_signals() -> None:
    """Signals as a foreground shell gives them: a suite started under ``nohup``, or as a
    background job of a script (SIGINT and SIGQUIT ignored), would pass the ignored ones on to
    every sweep subprocess, which then keeps them ignored as ``nohup lipsweep sweep`` asks
    (lipsweep/sweep/signals.py), and the signal tests see a child that never stops. None is
    blocked either."""
    defaults = python_defaults()
    for sig in WATCHED:
        if signal.getsignal(sig) == signal.SIG_IGN and defaults[sig] != signal.SIG_IGN:
            signal.signal(sig, defaults[sig])
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)


@pytest.fixture(autouse=True)
def _signals_as_they_were():
    """A test that leaves a signal's disposition or the blocked mask changed fails (and the
    state is put back): children inherit ignored and blocked signals (tests/_signals.py)."""
    before = signal_state()
    yield
    after = signal_state()
    if after != before:
        set_signal_state(before)
        pytest.fail("the test left the signal state changed: " + "; ".join(changes(before, after)))


@pytest.fixture()
def ray_in_this_process():
    """For a test that calls ``ray.init`` or ``Tuner.fit`` in its own process, outside a
    sweep's StopSignals: Ray's SIGTERM handler and Tune's SIGINT and SIGUSR1 ones, which they
    never put back, are put back at its end."""
    with signals_kept():
        yield


# Ray's auth mode and token, which a local sweep in the test process sets in os.environ itself
# (lipsweep.sweep.driver._local_token_auth) where monkeypatch cannot undo them (its delenv of
# an unset variable records nothing), and which Ray also caches (Config.initialize). One test
# leaking them left later tests' drivers in token mode with a Ray that was not: the trial
# actor died at start (test_s3_policies' real Tune run, in CI).
_RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture(autouse=True)
def _ray_auth_as_it_was():
    """Each test ends with Ray's auth variables, and Ray's view of them, as they were."""
    before = {name: os.environ.get(name) for name in _RAY_AUTH_ENV}
    yield
    if {name: os.environ.get(name) for name in _RAY_AUTH_ENV} == before:
        return
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if "ray" in sys.modules:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()


def pytest_sessionfinish(session, exitstatus) -> None:
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()  # an in-process Ray still holds files there
    shutil.rmtree(_RAY_TMPDIR, ignore_errors=True)


# Two workers (`make test`: -n 2 --dist loadgroup --no-loadscope-reorder). Every test that
# starts Ray (a sweep, a Tune run, `ray up`) is marked `ray` (its module says
# `pytestmark = pytest.mark.ray`) and so is in one group, "ray", which one worker runs first
# to last while the other runs the rest, a test file at a time (a module's fixtures made
# once). Two local sweeps at once gained nothing: a sweep's idle half went to the other
# sweep's Ray daemons, and each took twice as long (two 2-worker runs of the suite: 1,054 s
# and 1,671 s). A test that starts Ray without the mark fails (below), naming the mark.
RAY_MARK = "ray"
_SHARED_GROUP = {"test_head_bounds.py": "test_evaluate.py"}  # trained_tiny_model


def _group(item: pytest.Item) -> str:
    if item.get_closest_marker(RAY_MARK) is not None:
        return "ray"
    return _SHARED_GROUP.get(item.path.name, item.path.name)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    """Under pytest-xdist: each test in its group, the "ray" group first."""
    if not _XDIST_WORKER:
        return
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: _group(item) != "ray")


def _ray_sessions() -> set[str]:
    """Ray's sessions under this process's RAY_TMPDIR (Ray keeps them in its ray/ folder)."""
    ray_dir = os.path.join(_RAY_TMPDIR, "ray")
    return (
        {n for n in os.listdir(ray_dir) if n.startswith("session_")}
        if os.path.isdir(ray_dir)
        else set()
    )


def check_no_new_ray_session(test_file: str, before: set[str]) -> None:
    """Fail when a test outside the "ray" group started a Ray (a new session under this
    process's RAY_TMPDIR, in this process or a sweep subprocess): without the mark it would
    run a sweep beside another one (see above)."""
    new = sorted(_ray_sessions() - before)
    if new:
        pytest.fail(
            f"{test_file} started Ray ({new[0]} under RAY_TMPDIR) but is not marked "
            f"`{RAY_MARK}`: add `pytestmark = pytest.mark.{RAY_MARK}` to its module",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _ray_starts_in_the_ray_group_only(request):
    if _group(request.node) == "ray":
        yield
        return
    before = _ray_sessions()
    yield
    check_no_new_ray_session(request.node.path.name, before)


def bench_module(name: str):
    """A script of benchmarks/ imported as a module (benchmarks/ is not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def small_npz(path: Path) -> Path:
    """A 20-train/10-test CIFAR-10-shaped npz (uint8 images, labels, label names) at ``path``."""
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 256, (20, 3, 32, 32), dtype=np.uint8),
        y_train=np.arange(20) % 10,
        x_test=rng.integers(0, 256, (10, 3, 32, 32), dtype=np.uint8),
        y_test=np.arange(10),
        label_names=np.array([f"c{i}" for i in range(10)]),
    )
    return path


def tiny_model_config(**overrides) -> ModelConfig:
    """The tiny ViT used across tests: 32px, patch 4 (65 tokens), 4 blocks, width 128, 4 heads."""
    kw = dict(
        model="vit_tiny_patch16_224",
        img_size=32,
        patch_size=4,
        num_classes=10,
        depth=4,
        embed_dim=128,
        num_heads=4,
    )
    kw.update(overrides)
    return ModelConfig(**kw)


@pytest.fixture(scope="session")
def cifar_sample() -> dict[str, torch.Tensor]:
    """The embedded sample as float tensors in [0, 1] (x) and int64 labels (y)."""
    d = np.load(EMBEDDED_NPZ)
    return {
        "x_train": torch.from_numpy(d["x_train"]).float().div(255),
        "y_train": torch.from_numpy(d["y_train"]).long(),
        "x_test": torch.from_numpy(d["x_test"]).float().div(255),
        "y_test": torch.from_numpy(d["y_test"]).long(),
    }


@pytest.fixture(scope="session")
def trained_tiny_model(cifar_sample) -> PixelModel:
    """A tiny ViT trained for 2 epochs on the embedded sample (29 % test accuracy, chance is
    10 %; 4 epochs gave 30 % for twice the CI time), eval mode."""
    torch.manual_seed(0)
    model = create_model(tiny_model_config())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    x, y = cifar_sample["x_train"], cifar_sample["y_train"]
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(2):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = perm[i : i + 64]
            xb = x[idx]
            flip = torch.rand(len(idx), generator=g) < 0.5
            xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb)
            loss = torch.nn.functional.cross_entropy(model(xb), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="session")
def four_trial_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One real sweep of the grid ``_sweep_helpers.FOUR`` (2 epochs each; `lipsweep sweep` on
    local Ray, SQLite MLflow in the folder, experiment ``exp``), run once for the session: (its
    folder, the finished CLI process). tests/test_sweep.py checks the sweep itself;
    tests/test_pareto.py and tests/test_export.py run pareto and export on it (they add tags
    and artifacts, never remove any)."""
    from _sweep_helpers import FOUR, sweep_cmd, write_space

    d = tmp_path_factory.mktemp("four_trial_sweep")
    space = write_space(d, FOUR)
    proc = subprocess.run(sweep_cmd(d, space), cwd=d, capture_output=True, text=True, timeout=900)
    return d, proc


@pytest.fixture(scope="session")
def swept(four_trial_sweep) -> Path:
    """The folder of the finished four-trial sweep whose store is its ``mlflow.db``, the
    default ``--tracking-uri`` there (experiment ``exp``)."""
    d, proc = four_trial_sweep
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    return d


@pytest.fixture(scope="module")
def three_trial_store(tmp_path_factory):
    """A real SQLite MLflow store with one sweep, experiment ``pins``: a parent and three trial
    runs (t0 finished, t1 failed, t2 finished and confirmed at a reduced budget); returns
    (uri, tracker, parent run id)."""
    from _sweep_helpers import empty_store

    from lipsweep.decide.confirm import TAG_REQUEST, confirm_metric, request_key
    from lipsweep.tracking import FAILED, FINISHED, TAG_FAILURE, Tracker

    uri = empty_store(tmp_path_factory.mktemp("pins") / "mlflow.db")
    tracker = Tracker(uri, "pins")
    parent = tracker.open_parent("/nonexistent/ray", "pins", {"space": "test"})
    for tid, status in (("t0", FINISHED), ("t1", FAILED), ("t2", FINISHED)):
        rid = tracker.open_child(parent, tid, f"{tid} [none seed=0]", {"regularizer": "none"})
        if status == FAILED:
            tracker.set_tags(rid, {TAG_FAILURE: "loss is nan at epoch 1"})
        else:
            tracker.log_metrics(rid, {"acc_clean": 20.0}, step=0)
        if tid == "t2":
            tracker.log_metrics(rid, {confirm_metric(2): 12.0}, step=0)
            tracker.set_tags(rid, {TAG_REQUEST: request_key(64, 2)})
        tracker.end(rid, status)
    return uri, tracker, parent
