"""The sweep driver: a validated space -> Ray Tune trials -> MLflow runs.

Order of work: validate the space, every trial config and every option (done by the caller),
take the experiment's lock (:class:`SweepLock`), check the storage path, then start Ray, open
(or on ``--resume`` adopt) the parent run, and run ``Tuner.fit`` (or
``Tuner.restore(...).fit``). One driver per experiment: a second one exits 2 naming the
holder; a parent run is adopted only with ``--resume`` and only when its owner is gone.
Whatever happens, MLflow runs end FINISHED, FAILED or KILLED, never RUNNING: on an interrupt
the parent and any open children are marked KILLED and reopened by ``--resume``. (A SIGKILLed
driver cannot mark anything: its runs stay RUNNING until ``--resume`` reopens and finishes them.)

MLflow outages: the driver's tracker buffers writes while the server is unreachable (see
:mod:`lipsweep.tracking`), so trials keep training. Calls that need an answer block Tune's
event loop with retries for at most about ``TRACKING_RETRIES`` backoff steps (~3 min); past
that, or if the buffer fills, the sweep stops as interrupted (Tune's state is resumable).
Writes still undelivered at the end go to the spill file
(:func:`lipsweep.core.storage.spill_path`) and are replayed by ``--resume``.
"""

from __future__ import annotations

import fcntl
import logging
import os
import random
import shlex
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from lipsweep.core.config_base import ConfigError, UsageError
from lipsweep.core.storage import experiment_path, local_path, spill_path
from lipsweep.search.space import Resources, SweepSpec
from lipsweep.search.space_distributions import sample_space
from lipsweep.search.space_record import save_record
from lipsweep.sweep import ray_internals
from lipsweep.sweep.local_ray import LocalRay
from lipsweep.sweep.options import SweepOptions
from lipsweep.sweep.projection import gpu_hours_lines
from lipsweep.sweep.signals import FINISH, TUNE, StopSignals
from lipsweep.sweep.user_callbacks import create_callbacks
from lipsweep.tracking import (
    FAILED,
    FINISHED,
    KILLED,
    RUNNING,
    TAG_HEARTBEAT,
    TAG_OWNER,
    LocalIOError,
    SweepBusy,
    Tracker,
    TrackingError,
    redact_uri,
)

if TYPE_CHECKING:
    from lipsweep.sweep.callbacks import TrialOutcome

_log = logging.getLogger("lipsweep.sweep")
INTERRUPTED = "sweep interrupted"
TRACKING_RETRIES = 10  # blocking MLflow calls: backoff 1, 2, 4, 8, 16, 30, ... ~3 min
FLUSH_TIMEOUT_S = 600.0  # at the end, wait this long for buffered writes to be delivered
INTERRUPT_FLUSH_TIMEOUT_S = 30.0
LOCK_SUFFIX = ".lipsweep.lock"
HEARTBEAT_S = 60.0  # the owner refreshes its parent run's heartbeat this often
HEARTBEAT_STALE_S = 600.0  # older than this (on another host): the owner is gone


def owner_id() -> str:
    """'host pid since' of this driver, as the lock file and the parent run's tag hold it."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return f"{socket.gethostname()} {os.getpid()} {since}"


def describe_owner(owner: str) -> str:
    parts = owner.split()
    if len(parts) == 3:
        return f"host {parts[0]}, pid {parts[1]}, since {parts[2]}"
    return owner or "another driver"


@dataclass
class SweepOutcome:
    ok: bool
    summary: str
    parent_run_id: str
    experiment_path: str
    interrupted: bool = False
    trials: list[TrialOutcome] = field(default_factory=list)
    """How each trial ended that had ended by the return (those of earlier calls included)."""
    ran: int = 0
    """Trials this call started or continued (0: a ``--resume`` found every trial ended)."""


class SweepLock:
    """The exclusive lock of one experiment: ``<storage>/.<experiment>.lipsweep.lock``,
    ``fcntl.flock``-ed for the driver's life (the kernel drops it when the process dies, even
    on SIGKILL). It holds 'host pid since' of its owner. Remote storage has no lock file;
    there the parent run's owner and heartbeat tags stand in (:meth:`Tracker.open_parent`)."""

    def __init__(self, storage: str, experiment: str, owner: str) -> None:
        self.path = local_path(storage) / f".{experiment}{LOCK_SUFFIX}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+")
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            self._fh.close()
            raise UsageError(
                f"--experiment {experiment}: this sweep is being run by "
                f"{describe_owner(holder)} (lock {self.path}); wait for it to "
                "end, or stop it and rerun with --resume"
            ) from None
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(owner + "\n")
        self._fh.flush()

    def _holder(self) -> str:
        for _ in range(20):  # the holder writes its name just after taking the lock
            self._fh.seek(0)
            text = self._fh.read().strip()
            if text:
                return text
            time.sleep(0.05)
        return ""

    def release(self) -> None:
        if not self._fh.closed:
            self._fh.close()  # closing drops the flock; the file stays (harmless, reused)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _adoption_policy(resume: bool, locked: bool = False):
    """``adopt(run)`` for :meth:`Tracker.open_parent`: raise SweepBusy unless the existing
    parent run may be taken over (only with ``resume``, and only when its owner is gone;
    ``locked``: this driver holds the experiment's file lock, so no live driver does)."""

    def adopt(run) -> None:
        rid = run.info.run_id
        if not resume:
            raise SweepBusy(
                f"MLflow already has parent run {rid} ({run.info.status}) for "
                f"this sweep; pass --resume to continue it, or choose another "
                "--experiment / --storage"
            )
        owner = run.data.tags.get(TAG_OWNER, "")
        if locked or run.info.status != RUNNING or not owner:
            return  # our file lock proves no live driver holds this storage path
        host, pid = (owner.split() + ["", ""])[:2]
        if host == socket.gethostname():
            gone = not (pid.isdigit() and _pid_alive(int(pid)))
        else:
            try:
                beat = float(run.data.tags.get(TAG_HEARTBEAT, "0"))
            except ValueError:
                beat = 0.0
            gone = time.time() - beat > HEARTBEAT_STALE_S
        if not gone:
            raise SweepBusy(
                f"parent run {rid} is held by a live driver: "
                f"{describe_owner(owner)}; wait for it to end or stop it"
            )

    return adopt


def _tracking_cause(exc: BaseException) -> Optional[TrackingError]:
    """The TrackingError behind ``exc`` (Tune may re-raise a callback's error wrapped)."""
    while exc is not None:
        if isinstance(exc, TrackingError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _deliver(tracker: Tracker, spill: Path, timeout_s: float) -> int:
    """Flush buffered MLflow writes; spill what is left to ``spill``. Returns how many."""
    if tracker.flush(timeout_s) == 0:
        return 0
    n = tracker.spill(spill)
    _log.error(
        "MLflow at %s is unreachable: %d writes saved to %s; they are delivered by "
        "the next `lipsweep sweep ... --resume`",
        tracker.shown_uri,
        n,
        spill,
    )
    return n


def _scheduler(spec: SweepSpec, opts: SweepOptions):
    """The space's scheduler (lipsweep/search/schedulers/), or None; on ``--resume`` a
    scheduler with state reads back what it had recorded (``schedulers.state_path``)."""
    if spec.scheduler is None:
        return None
    from lipsweep.search.schedulers import SchedulerContext, state_path
    from lipsweep.sweep.schedulers._tune import create_tune_scheduler

    lazy = spec.search is not None and spec.search.lazy
    ctx = SchedulerContext(
        epochs=spec.epochs,
        seeds=len(spec.repeats) if lazy else 1,
        trials=spec.trials,
        state_path=state_path(opts.storage, opts.experiment),
        resume=opts.resume,
    )
    return create_tune_scheduler(spec.scheduler, ctx)


def _tune_config(spec: SweepSpec, opts: SweepOptions, scheduler: Any = None):
    from ray import tune

    mct = opts.max_concurrent_trials or spec.max_concurrent_trials or None
    if spec.search is not None or spec.scheduler is not None:
        # Per-epoch reports lack the final metrics a searcher learns from; load_space has
        # already checked every metric name against what trials report.
        os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    from lipsweep.search.searchers import SearchRequest, create_searcher
    from lipsweep.search.searchers.study import study_db

    search = spec.search
    plan = create_searcher(
        search.algorithm if search else "grid",
        search.settings if search else None,
        SearchRequest(
            fixed=spec.fixed,
            space=search.space if search else None,
            trials=spec.trials,
            study_db=study_db(opts.tracking_uri, opts.storage, opts.experiment),
            study_name=opts.experiment,
            repeats=list(spec.repeats),
        ),
    )
    cfg = tune.TuneConfig(
        search_alg=plan.search_alg,
        scheduler=scheduler,
        num_samples=plan.num_samples,
        max_concurrent_trials=mct,
        reuse_actors=True,
    )
    return cfg, plan.param_space


# The --ray-address this process's driver joined and that cluster's GCS address: the process
# stays connected after the sweep (a cluster is never stopped), so a later sweep naming the same
# address, while the same cluster is still the one connected, runs on it as asked.
_joined: Optional[tuple[str, str]] = None


def _warn_unapplied_ray_options(opts: SweepOptions, cpus: Optional[float], gcs: str) -> None:
    """Say which Ray options the Ray already running in this process (``cpus`` CPUs, GCS at
    ``gcs``) leaves unapplied."""
    unapplied = []
    if opts.num_cpus is not None and cpus != opts.num_cpus:
        has = f" (it has {cpus:g} CPU{'' if cpus == 1 else 's'})" if cpus else ""
        unapplied.append(f"num_cpus={opts.num_cpus}{has}")
    if opts.ray_address and (opts.ray_address, gcs) != _joined:
        unapplied.append(f"ray_address={opts.ray_address!r}")
    if unapplied:
        _log.warning(
            "Ray is already running in this process, and the sweep runs on it: %s not applied "
            "(call ray.shutdown() first to have the sweep start or join the Ray it names)",
            " and ".join(unapplied),
        )


def _init_ray(opts: SweepOptions) -> Optional[LocalRay]:
    """Join ``--ray-address``, or start a local Ray; returns the local instance (which the
    driver stops before it returns), ``None`` when Ray was joined or already running."""
    import ray

    if ray.is_initialized():  # e.g. a notebook's ray.init(): the sweep runs on that Ray
        gcs = ray.get_runtime_context().gcs_address
        _warn_unapplied_ray_options(opts, ray.cluster_resources().get("CPU"), gcs)
        return None
    if opts.ray_address:  # TCP-probed once, by the caller, before anything was written
        try:
            ray.init(address=opts.ray_address, log_to_driver=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UsageError(f"--ray-address {opts.ray_address}: {exc}") from None
        global _joined
        _joined = (opts.ray_address, ray.get_runtime_context().gcs_address)
        return None
    from lipsweep.sweep import local_ray

    if not opts.dashboard:  # the dashboard's login takes the token `ray get-auth-token` prints
        _local_token_auth()
    elif os.environ.get("RAY_AUTH_MODE", "token").lower() == "token":
        from lipsweep.sweep.ray_token import private_token_file

        private_token_file()  # Ray would write ~/.ray/auth_token readable by everyone
    try:
        local, ctx = local_ray.start(
            num_cpus=opts.num_cpus,
            include_dashboard=opts.dashboard,
            dashboard_host="127.0.0.1",
            log_to_driver=True,
            configure_logging=True,
            logging_level=logging.WARNING,
        )
    except Exception as exc:  # noqa: BLE001 - a timeout or a daemon that died: one line, exit 1
        _log.debug("local Ray did not start", exc_info=True)
        raise OSError(
            f"could not start a local Ray ({type(exc).__name__}: {str(exc)[:300]}); nothing "
            "was started or written. A heavily loaded machine can make Ray's daemons miss "
            "their start-up timeouts: retry, or join a running Ray with --ray-address"
        ) from None
    if opts.dashboard:
        _log.info(
            "Ray dashboard: http://%s (log in with the token `ray get-auth-token` prints)",
            ctx.dashboard_url,
        )
    return local


def _local_token_auth() -> None:
    """Token auth with a random per-driver token for a local Ray, unless RAY_AUTH_MODE is set.

    Ray 2.60's gRPC servers listen on every interface, and ray.init rewrites a loopback
    ``_node_ip_address`` to the host's IP, so a local Ray cannot be bound to 127.0.0.1. With a
    token, only this driver and the Ray processes it starts (which inherit it) can talk to it.
    """
    if "RAY_AUTH_MODE" in os.environ:
        return
    import secrets

    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    ray_internals.enable_token_auth()  # Ray caches the mode and the token at import


def _ray_environment() -> None:
    """Ray's and Tune's settings that are read when Ray is first imported."""
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "60")
    # Under `uv run` Ray would rebuild the project env for its workers (a copy of the folder, a
    # second install, and a raylet warning that VIRTUAL_ENV does not match): use this one.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    # Tune's default loggers include TensorBoardX's, which imports torch into the driver (~3-4
    # s, ~300 MB) to write event files nobody reads (MLflow is the tracker): the driver adds
    # the CSV and JSON loggers itself (_tune_loggers) and Tune adds none.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    if not (sys.stdout.isatty() and sys.stderr.isatty()):  # a log: no ANSI colour codes
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # around Ray's "(train_trial pid=N)"
    # A trial's few worker lines (its device) are shown when they happen: Ray's dedup held the
    # second trial's back until shutdown, after the summary. Read when Ray is first imported.
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def _tune_loggers() -> list[Any]:
    """Tune's per-trial ``progress.csv`` and ``result.json`` (its experiment analysis reads
    them), which Tune adds itself unless ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS`` is 1."""
    if os.environ.get("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0") != "1":
        return []
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [CSVLoggerCallback(), JsonLoggerCallback()]


def build_callbacks(spec: SweepSpec) -> list[Any]:
    """The space's ``callbacks:`` imported and built (Ray; ConfigError naming
    ``callbacks[i]``), with Ray's environment set first, as for the sweep itself."""
    if not spec.callbacks:
        return []
    _ray_environment()
    return create_callbacks(spec.callbacks, spec.path)


def run_sweep(
    spec: SweepSpec,
    opts: SweepOptions,
    stop: Optional[StopSignals] = None,
    extra_callbacks: Optional[Sequence[Any]] = None,
    *,
    owner: Optional[str] = None,
    locked: bool = False,
) -> SweepOutcome:
    """Run (or resume) a validated sweep; see the module docstring for the guarantees.

    ``opts`` has its experiment and storage decided (:meth:`SweepOptions.resolved`).
    ``owner``: this driver, as the parent run's tag holds it (None: :func:`owner_id`);
    ``locked``: it holds the experiment's file lock (local storage).

    ``stop`` (active for the call) turns SIGINT/SIGTERM/SIGHUP into a clean shutdown.
    ``extra_callbacks``: the space's ``callbacks:`` already built (the API builds them before
    its first write); None builds them here, before Ray starts."""
    if extra_callbacks is None:
        extra_callbacks = build_callbacks(spec)
    _ray_environment()
    # The scheduler before Ray and the parent run: one it refuses leaves nothing started.
    try:
        scheduler = _scheduler(spec, opts)
    except ConfigError as err:
        raise err.with_source(spec.path) if err.source is None else err from None
    tracker = Tracker(
        opts.tracking_uri, opts.experiment, retries=TRACKING_RETRIES, buffer_writes=True
    )
    spill = spill_path(opts.storage, opts.experiment)
    flat_params = {
        "space_file": Path(spec.path).name,
        "num_trials": spec.num_trials,
        "sweep_kind": spec.search.algorithm if spec.search else "grid",
        "scheduler": spec.scheduler.type if spec.scheduler else "none",
        "resources_cpu": spec.resources.cpu,
        "resources_gpu": spec.resources.gpu,
        **{f"fixed.{k}": v for k, v in spec.fixed.items()},
    }
    # Ray before the parent run: a Ray that cannot start leaves nothing RUNNING.
    stop = stop or StopSignals()
    try:
        local = _init_ray(opts)
    except SystemExit as exc:  # Ray's SIGTERM handler (sys.exit(15)) fired inside ray.init
        if exc.code != signal.SIGTERM:
            raise
        if stop.received is None:
            stop.received = signal.SIGTERM
        _log.warning("SIGTERM: stopping the sweep")
        raise KeyboardInterrupt from None
    stop.reinstall()  # ray.init replaced the SIGTERM handler with sys.exit
    try:
        return _run_on_ray(
            spec, opts, stop, tracker, spill, flat_params, list(extra_callbacks), scheduler,
            owner=owner or owner_id(), locked=locked,
        )  # fmt: skip
    finally:
        if local is not None:  # whatever happened: no process of the Ray it started outlives it
            local.stop()


def _run_on_ray(
    spec: SweepSpec,
    opts: SweepOptions,
    stop: StopSignals,
    tracker: Tracker,
    spill: Path,
    flat_params: dict[str, Any],
    extra_callbacks: list[Any],
    scheduler: Any = None,
    *,
    owner: str,
    locked: bool,
) -> SweepOutcome:
    """The parent run, Tune's loop and the runs' end, on a Ray that is up."""
    from ray import tune

    from lipsweep.sweep.callbacks import (
        ConsoleProgress,
        MlflowSweepCallback,
        first_objective,
        summarize,
    )
    from lipsweep.sweep.checkpoint_refs import CheckpointRepair
    from lipsweep.sweep.handoff import Handoff, unbind_all
    from lipsweep.sweep.trainable import train_trial

    exp_path = experiment_path(opts.storage, opts.experiment)
    try:
        if opts.resume:
            tracker.replay(spill)
        parent = tracker.open_parent(
            exp_path,
            opts.experiment,
            flat_params,
            _space_file(spec),
            owner=owner,
            adopt=_adoption_policy(opts.resume, locked),
            datasets=_sweep_datasets(spec),
        )
    except SweepBusy as err:
        raise UsageError(f"--experiment {opts.experiment}: {err}") from None
    except LocalIOError as err:  # a local file (a full disk): exit 1 naming it, not the URI
        failed = OSError(str(err))
        failed.errno = err.errno
        raise failed from err
    except TrackingError as err:  # nothing started yet: a bad or unreachable --tracking-uri
        if tracker.pending:
            _log.error(
                "%d MLflow writes for the new parent run were not delivered", tracker.pending
            )
        raise UsageError(f"--tracking-uri: {err}") from None
    from lipsweep.sweep.heartbeat import Heartbeat

    tune_cfg, param_space = _tune_config(spec, opts, scheduler)
    mlflow_cb = MlflowSweepCallback(tracker, parent, stop_reasons=tune_cfg.scheduler)
    console = ConsoleProgress(
        spec.num_trials, first_objective(spec), opts.status_every, total_epochs=total_epochs(spec)
    )
    callbacks = [
        mlflow_cb,
        console,
        Heartbeat(tracker, parent, HEARTBEAT_S),
        CheckpointRepair(),  # --resume: a snapshot may name a deleted or a superseded checkpoint
        *extra_callbacks,  # the space's `callbacks:`, after lipsweep's own
        *_tune_loggers(),
    ]
    trainable = tune.with_resources(train_trial, ray_resources(spec.resources))
    run_cfg = tune.RunConfig(
        name=opts.experiment,
        storage_path=opts.storage,
        callbacks=callbacks,
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=spec.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
    )
    interrupted = False
    tracking_error: Optional[TrackingError] = None
    # Tuner.restore unpickles the first start's callbacks and scheduler: this run's answer
    # for them instead (Tune has no public setter; sweep/handoff.py)
    handoff = f"{exp_path}#"
    for role, obj in [
        *zip(("mlflow", "console", "heartbeat"), callbacks),
        ("scheduler", tune_cfg.scheduler),
    ]:
        if isinstance(obj, Handoff):
            obj.bind(handoff + role)
    try:
        if opts.resume:
            tuner = tune.Tuner.restore(
                exp_path,
                trainable=trainable,
                resume_unfinished=True,
                resume_errored=True,
                param_space=param_space,
            )
        else:
            kwargs = {"param_space": param_space} if param_space is not None else {}
            tuner = tune.Tuner(trainable, tune_config=tune_cfg, run_config=run_cfg, **kwargs)
            save_record(spec, opts.storage, opts.experiment)  # what --resume compares against
        stop.enter(TUNE)
        results = tuner.fit()
        stop.enter(FINISH)
        del results  # outcomes come from the callbacks (and MLflow, for earlier runs)
        _backfill_outcomes(mlflow_cb, tracker, parent)
        interrupted = len(mlflow_cb.outcomes) < spec.num_trials
    except KeyboardInterrupt:
        interrupted = True
    except Exception as exc:  # noqa: BLE001 - only MLflow outages are handled here
        tracking_error = _tracking_cause(exc)
        if tracking_error is None:
            raise
        interrupted = True
    finally:
        unbind_all(handoff)
        if interrupted:
            _close_interrupted(tracker, parent, spill, tracking_error, spec, opts)
    if interrupted:
        reason = "interrupted"
        if isinstance(tracking_error, LocalIOError):
            reason = f"local file error: {tracking_error}"
        elif tracking_error is not None:
            reason = f"MLflow unreachable: {tracking_error}"
        trials = list(mlflow_cb.outcomes.values())
        ran = console.progress.ran
        return SweepOutcome(
            False, reason, parent, exp_path, interrupted=True, trials=trials, ran=ran
        )
    ok, summary = summarize(mlflow_cb.outcomes, spec.num_trials)
    ran = console.progress.ran
    if opts.resume and ran == 0:
        summary = "nothing left to run: every trial had ended before this --resume\n" + summary
    undelivered = _deliver(tracker, spill, FLUSH_TIMEOUT_S)
    if not undelivered:  # statuses are only read once every buffered write has landed
        try:
            tracker.end_running_children(parent, FAILED, "trial did not report an outcome")
            tracker.end(parent, FINISHED if ok else FAILED)
        except TrackingError as err:
            _log.error("%s", err)
        undelivered = _deliver(tracker, spill, FLUSH_TIMEOUT_S)
    if undelivered:
        ok = False
        summary += (
            f"\n{undelivered} MLflow writes could not be delivered to "
            f"{redact_uri(opts.tracking_uri)}; saved to {spill}. Rerun with --resume "
            "once MLflow is reachable to deliver them"
        )
    trials = list(mlflow_cb.outcomes.values())
    return SweepOutcome(ok, summary, parent, exp_path, trials=trials, ran=ran)


def _space_file(spec: SweepSpec) -> Optional[Path]:
    """The space's YAML file, logged to the parent run; None for a space given as a dict."""
    path = Path(spec.path)
    return path if path.is_file() and path.read_text() == spec.text else None


def _sweep_datasets(spec: SweepSpec) -> list[dict[str, Any]]:
    """Flat configs naming the sweep's datasets (the parent run's MLflow inputs): the trials',
    or, for a searcher that samples them later, the fixed settings with defaults filled in."""
    if spec.trials:
        return spec.trials
    from lipsweep.settings.config import TrialConfig

    try:
        return [TrialConfig.from_flat(spec.fixed).to_flat()]
    except ConfigError:
        return []


def _close_interrupted(
    tracker: Tracker,
    parent: str,
    spill: Path,
    tracking_error: Optional[TrackingError],
    spec: SweepSpec,
    opts: SweepOptions,
) -> None:
    """Mark open runs KILLED (if MLflow answers) and keep every undelivered write on disk."""
    n = 0
    if tracking_error:  # MLflow is down: runs stay RUNNING until --resume reopens them
        tracker.spill(spill)
        _log.error("sweep stopped: %s", tracking_error)
    elif _deliver(tracker, spill, INTERRUPT_FLUSH_TIMEOUT_S) == 0:
        try:
            n = tracker.end_running_children(parent, KILLED, f"{INTERRUPTED}; rerun with --resume")
            tracker.end(parent, KILLED)
        except TrackingError as err:
            _log.error("%s", err)
        _deliver(tracker, spill, INTERRUPT_FLUSH_TIMEOUT_S)
    _log.warning(
        "sweep interrupted (%d running trials marked KILLED); continue it with: %s",
        n,
        resume_command(str(spec.path), opts.experiment, opts.storage, opts.tracking_uri),
    )


def resume_command(space: str, experiment: str, storage: str, tracking_uri: str) -> str:
    """The command that continues an interrupted sweep: its space, and where its Tune state
    and its MLflow runs are (the tracking URI with any credentials hidden), shell-quoted."""
    return shlex.join(
        ["lipsweep", "sweep", space, "--experiment", experiment, "--storage", storage,
         "--tracking-uri", redact_uri(tracking_uri), "--resume"]
    )  # fmt: skip


def total_epochs(spec: SweepSpec) -> int:
    """Epochs of the whole sweep run in full: every trial's ``epochs`` (a lazily sampled
    search: ``num_samples`` x the fixed epochs, default 40)."""
    if spec.trials:
        return sum(int(t.get("epochs", 40)) for t in spec.trials)
    return spec.num_trials * int(spec.fixed.get("epochs", 40))


def _backfill_outcomes(cb, tracker: Tracker, parent: str) -> None:
    """Trials that ended in an earlier (interrupted) run are not re-reported on resume; read
    their outcome back from MLflow. Runs closed only because the sweep was interrupted are
    not outcomes: those trials are resumed."""
    from lipsweep.sweep.callbacks import TrialOutcome
    from lipsweep.tracking import TAG_FAILURE, TAG_TRIAL_ID

    for run in tracker.children(parent):
        tid = run.data.tags.get(TAG_TRIAL_ID)
        reason = run.data.tags.get(TAG_FAILURE, "")
        if reason.startswith(INTERRUPTED):
            continue
        if tid and tid not in cb.outcomes and run.info.status in (FINISHED, FAILED, KILLED):
            cb.outcomes[tid] = TrialOutcome(
                tid, run.info.run_name or tid, run.info.status, reason, run_id=run.info.run_id
            )


def ray_resources(res: Resources) -> dict[str, float]:
    """A trial's Ray resources; an ``accelerator_type`` is Ray's custom resource
    ``accelerator_type:<type>`` (every GPU node offers 1 of its own type), asked for in the
    small amount Ray's own ``accelerator_type`` option uses."""
    out = {"cpu": res.cpu, "gpu": res.gpu}
    if res.accelerator_type:
        out[f"accelerator_type:{res.accelerator_type}"] = 0.001
    return out


def dry_run_lines(spec: SweepSpec) -> list[str]:
    """Human-readable list of the trials a sweep would run (no Ray)."""
    from lipsweep.regularizers import setting_names
    from lipsweep.search.space_display import recipe_lines, trial_label

    kind = spec.search.algorithm if spec.search else "grid"
    lines = [
        f"sweep {spec.name!r} from {spec.path}: {spec.num_trials} trials ({kind}"
        + (f", {spec.scheduler.type} scheduler" if spec.scheduler else "")
        + ")",
        f"resources per trial: cpu={spec.resources.cpu} gpu={spec.resources.gpu}"
        + (
            f" accelerator_type={spec.resources.accelerator_type}"
            if spec.resources.accelerator_type
            else ""
        ),
    ]
    if spec.callbacks:
        lines.append("Tune callbacks: " + ", ".join(ref.path for ref in spec.callbacks))
    lines += recipe_lines(spec)
    if spec.trials:
        labelled = {"regularizer", "seed", *setting_names()}
        varying = sorted(
            {k for t in spec.trials for k in t if any(t.get(k) != u.get(k) for u in spec.trials)}
        )
        for i, t in enumerate(spec.trials):
            extra = " ".join(f"{k}={t[k]}" for k in varying if k not in labelled and k in t)
            lines.append(f"  {i:3d}  {trial_label(t)}  {extra}".rstrip())
    else:
        rng = random.Random(spec.search.seed)
        lines.append(
            f"  {kind} samples lazily; e.g. {sample_space(spec.search.space, rng, spec.path)}"
        )
    return lines + gpu_hours_lines(spec)
