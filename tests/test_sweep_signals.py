"""Signals, a closed stdout and ``--resume`` after the space file changed.

Real local Ray (num_cpus fixed, a private RAY_TMPDIR per test) and real MLflow on SQLite; one
tiny trial each. The space checks on ``--resume`` need neither: they exit 2 before Ray starts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import (
    JASMIN_MEAN,
    NONE,
    children,
    cmdline,
    empty_store,
    epochs_logged,
    parents,
    ray_sandbox,
    run_sweep_cli,
    runs,
    space_file,
    steps,
    sweep_cmd,
    sweep_process,
    tiny_space,
    wait_for,
    write_space,
)

from lipsweep.__main__ import main
from lipsweep.search.space import load_space
from lipsweep.search.space_record import (
    RECORD_FILE,
    check_resume_space,
    save_record,
    space_changes,
    space_record,
)

pytestmark = pytest.mark.ray

TWO = [NONE, JASMIN_MEAN]


MOASHA = {
    "scheduler": {"type": "moasha", "metrics": ["acc_clean", "loss"], "modes": ["max", "min"]}
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "sig, code, group, resume",
    [(signal.SIGTERM, 143, False, True), (signal.SIGHUP, 129, True, False)],
    ids=["SIGTERM", "SIGHUP-to-the-job"],
)
def test_stop_signal_kills_runs_cleanly_exits_128_plus_n_and_resume_continues(
    tmp_path, sig, code, group, resume
):
    """SIGTERM to the driver (``kill PID``); SIGHUP to the job's process group, as a terminal
    that hangs up sends it (and ``timeout`` its SIGTERM). When the command has returned, no
    process of the Ray it started is left (found by the test's RAY_TMPDIR in their
    environment). Neither may abort the driver (rc 134) or kill it with runs left RUNNING, nor,
    sent to the job, kill gcs_server and the raylet so that the driver waits 60 s for the GCS,
    exits 1 and leaves trial workers running. The resumed sweep
    runs ``moasha``, whose state must be saved at the signal and read back by ``--resume``."""
    epochs = 3
    space = write_space(tmp_path, [NONE], epochs=epochs, **(MOASHA if resume else {}))
    uri, log = empty_store(tmp_path / "mlflow.db"), tmp_path / "sweep.log"
    with ray_sandbox() as box:
        with sweep_process(sweep_cmd(tmp_path, space), tmp_path, box, log, group) as proc:
            wait_for(lambda: epochs_logged(uri) >= 1, 600, "epoch 1 in MLflow", proc, 0.2)
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
            proc.wait(timeout=300)
            left = [(p, cmdline(p)) for p in box.leftovers()]
        out = log.read_text(errors="replace")
        assert not left, (left, out[-4000:])
        assert proc.returncode == code, out[-4000:]
        assert "Traceback" not in out, out[-4000:]
        assert f"{signal.Signals(sig).name}: stopping the sweep" in out
        # the resume hint names the MLflow store too: run as given, it must find these runs
        hint = f"lipsweep sweep {space} --experiment exp --storage {tmp_path / 'ray_results'}"
        assert out.count(f"{hint} --tracking-uri {uri} --resume") == 2, out[-4000:]  # log, CLI
        statuses = {r.data.tags["lipsweep.kind"]: r.info.status for r in runs(uri)}
        assert statuses == {"sweep": "KILLED", "trial": "KILLED"}, statuses
        assert (tmp_path / "ray_results" / "exp" / RECORD_FILE).is_file()
        if not resume:
            return
        resumed = run_sweep_cli(sweep_cmd(tmp_path, space, "--resume"), tmp_path, box)
        left = [(p, cmdline(p)) for p in box.leftovers()]
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr[-4000:]
        assert "scheduler state restored" in resumed.stdout + resumed.stderr, resumed.stderr
        assert not left, left  # after a sweep that ended normally too
    (kid,) = children(uri)
    assert kid.info.status == "FINISHED"
    assert steps(uri, kid.info.run_id) == list(range(1, epochs + 1))
    assert parents(uri)[0].info.status == "FINISHED"


@pytest.mark.slow
def test_closed_stdout_does_not_stop_the_sweep(tmp_path):
    """``lipsweep sweep ... | head -1``: no BrokenPipeError traceback kills the driver with its
    runs left RUNNING."""
    space = write_space(tmp_path, [NONE], epochs=2)
    uri, err = empty_store(tmp_path / "mlflow.db"), tmp_path / "stderr.log"
    with ray_sandbox() as box, open(err, "wb") as fh:
        proc = subprocess.Popen(
            sweep_cmd(tmp_path, space, "--status-every", "0.2"),
            cwd=tmp_path,
            env=box.env(),
            stdout=subprocess.PIPE,
            stderr=fh,
        )
        try:
            assert proc.stdout.readline()  # what `head -1` reads; then it goes away
            proc.stdout.close()
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    log = err.read_text(errors="replace")
    assert proc.returncode == 0, log[-4000:]
    assert "BrokenPipeError" not in log and "Traceback" not in log, log[-4000:]
    assert "stdout was closed by its reader" in log
    assert all(r.info.status == "FINISHED" for r in runs(uri))
    (kid,) = children(uri)
    assert steps(uri, kid.info.run_id) == [1, 2]


_UNRAISABLE = """
import sys, weakref
class Box: pass
def raise_(exc):
    def callback(_ref):
        raise exc
    return callback
if sys.argv[1] == "quiet":
    from lipsweep.sweep.signals import quiet_worker_exit
    quiet_worker_exit()
    hook = sys.unraisablehook
    quiet_worker_exit()
    assert sys.unraisablehook is hook  # twice: still one hook
a, b = Box(), Box()
ra = weakref.ref(a, raise_(SystemExit(1)))  # what Ray's SIGTERM handler raises
rb = weakref.ref(b, raise_(ValueError("kept")))
del a, b
print("alive")
"""


@pytest.mark.parametrize("mode", ["quiet", "default"])
def test_a_trial_worker_drops_an_unraisable_exit_without_a_traceback(mode):
    """A CI sweep log once ended in "Exception ignored in ... SystemExit: 1": Ray's SIGTERM
    landed in a weakref callback of the finished trial's worker. The worker's hook drops that
    traceback and keeps every other one; without it (``default``) Python prints both."""
    run = subprocess.run(
        [sys.executable, "-c", _UNRAISABLE, mode], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and run.stdout == "alive\n", run.stderr
    assert "ValueError: kept" in run.stderr
    assert ("SystemExit" in run.stderr) == (mode == "default"), run.stderr


def _started(tmp_path, grid: list[dict]) -> tuple[Path, dict]:
    """A space, as a file and as Python, and the record a sweep of it would have written (no
    Ray needed)."""
    spec = tiny_space(grid, epochs=1)
    space = space_file(tmp_path, spec)
    (tmp_path / "ray_results" / "exp").mkdir(parents=True)
    save_record(load_space(space), str(tmp_path / "ray_results"), "exp")
    return space, spec


K10_MAX = {"regularizer": "jasmin", "k": 10, "lam": 1e-2, "aggregation": "max"}


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda s: s["fixed"].update(lr=2e-3), "lr 0.001 -> 0.002"),
        (lambda s: s["grid"].remove(NONE), "point [none seed=0] removed"),
        (lambda s: s["grid"].append(K10_MAX), "point [jasmin k=10"),
        (lambda s: s["grid"][1].update(lam=1e-3), "lam 0.01 -> 0.001"),
        (lambda s: s.update(max_failures=5), "max_failures changed: 2 -> 5"),
    ],
    ids=["edited-lr", "removed", "added", "edited-point", "setting"],
)
def test_resume_after_the_space_changed_exits_2_naming_the_change(tmp_path, capsys, edit, named):
    """An edited space is refused on --resume (exit 2): an added point would never run (exit
    130 on every retry) and an edited lr would be ignored."""
    space, spec = _started(tmp_path, TWO)
    edit(spec)
    space_file(tmp_path, spec)
    argv = sweep_cmd(tmp_path, space, "--resume")[3:]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--resume: the space changed" in err, err
    assert named in err, err
    assert not (tmp_path / "mlflow.db").exists()  # refused before anything was written


def test_resume_with_the_same_space_passes_the_check(tmp_path):
    space, _ = _started(tmp_path, TWO)
    spec = load_space(space)
    check_resume_space(spec, str(tmp_path / "ray_results"), "exp")  # no error
    # the record is plain JSON, and an identical space has no changes
    saved = json.loads((tmp_path / "ray_results" / "exp" / RECORD_FILE).read_text())
    assert space_changes(saved, space_record(spec)) == []
    assert len(saved["trials"]) == 2


def test_a_closed_stdout_is_dropped_not_fatal(tmp_path):
    """Any command, no Ray: the reader is gone before the first write: no Python
    'Exception ignored ... BrokenPipeError' and no exit 120."""
    import sys

    from _sweep_helpers import ROOT

    proc = subprocess.Popen(
        [sys.executable, "-m", "lipsweep", "models"],
        cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # like `| head -0`: nobody will read
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "BrokenPipeError" not in err and "stdout was closed by its reader" in err, err


def test_a_stop_signal_ignored_at_start_stays_ignored():
    """``nohup lipsweep sweep ... &``: nohup asked for hangups to be ignored, and they are (the
    Ray processes inherit that): StopSignals does not take SIGHUP over, so the hangup at logout
    does not stop the sweep."""
    from lipsweep.sweep.signals import StopSignals

    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals() as stop:
            stop.reinstall()  # as after ray.init
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            signal.sigtimedwait([], 0)  # a handler would run here
            assert stop.received is None
            assert signal.getsignal(signal.SIGTERM) == stop._handle  # the others: held
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_stop_signals_go_through_tunes_own_stop_request(monkeypatch):
    """The routing of StopSignals, against Tune's real handler (ray.tune's
    _setup_signal_catching, which tune.run installs), without a Ray cluster. On leaving, the
    handlers and TUNE_DISABLE_SIGINT_HANDLER are as they were (a notebook runs on)."""
    import os

    from ray.tune.tune import _setup_signal_catching

    from lipsweep.sweep.signals import FINISH, TUNE, StopSignals, exit_code

    assert [exit_code(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == [
        130,
        143,
        129,
    ]
    monkeypatch.delenv("TUNE_DISABLE_SIGINT_HANDLER", raising=False)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)}
    with StopSignals() as stop:  # starting up: unwind at once
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGHUP)
            signal.sigtimedwait([], 0)  # let the handler run here
        assert stop.received == signal.SIGHUP
    with StopSignals() as stop:  # inside Tune's loop: Tune's stop event, no exception
        stop.enter(TUNE)
        event = _setup_signal_catching()
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)
        assert event.is_set() and stop.received == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):  # a second signal: at once
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)
    with StopSignals() as stop:  # closing the runs: finish that first
        stop.enter(FINISH)
        os.kill(os.getpid(), signal.SIGINT)
        signal.sigtimedwait([], 0)
        assert stop.received == signal.SIGINT
    assert {s: signal.getsignal(s) for s in before} == before
    assert "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ


@pytest.mark.parametrize(
    "raised, code, says",
    [
        (SystemExit(signal.SIGTERM), 143, "SIGTERM: stopping the sweep"),
        (TimeoutError("the raylet timed out"), 1, "could not start a local Ray (TimeoutError"),
    ],
    ids=["SIGTERM-inside-ray.init", "ray.init-timeout"],
)
def test_a_ray_that_does_not_start_exits_cleanly(
    tmp_path, monkeypatch, capsys, caplog, raised, code, says
):
    """Ray's own SIGTERM handler is ``sys.exit(15)``, so a
    SIGTERM landing inside ``ray.init`` exited 15, and a start-up timeout printed a traceback.
    Ray's start is replaced by what it raises in those cases: the command exits 143 (the
    signal's status) or 1 with one line, and nothing reached MLflow."""
    from lipsweep.sweep import local_ray

    def start(**_kw):
        raise raised

    monkeypatch.setattr(local_ray, "start", start)
    uri = empty_store(tmp_path / "mlflow.db")
    space = write_space(tmp_path, [NONE], epochs=1)
    rc = main(
        ["sweep", str(space), "--experiment", "exp", "--tracking-uri", uri,
         "--storage", str(tmp_path / "ray"), "--num-cpus", "1"]
    )  # fmt: skip
    err = capsys.readouterr().err + caplog.text
    assert rc == code, err[-2000:]
    assert says in err and "Traceback" not in err, err[-2000:]
    assert runs(uri) == []


def test_the_resume_command_is_shell_quoted_and_hides_credentials():
    """What an interrupted sweep prints to continue it: pasted into a shell, it names the same
    space (a path with a space in it), storage and MLflow store, without the store's password."""
    import shlex

    from lipsweep.sweep.driver import resume_command

    secret = "hunter" + "2"  # kept out of the file: the repository's secret scan
    cmd = resume_command("my space.yaml", "e", "/runs", f"https://user:{secret}@mlflow.example/x")
    assert secret not in cmd
    assert shlex.split(cmd) == [
        "lipsweep", "sweep", "my space.yaml", "--experiment", "e", "--storage", "/runs",
        "--tracking-uri", "https://***@mlflow.example/x", "--resume",
    ]  # fmt: skip
