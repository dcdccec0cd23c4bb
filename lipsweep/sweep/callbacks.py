"""Tune callbacks that run in the driver: MLflow logging keyed by trial id, and console lines.

:class:`MlflowSweepCallback` turns Tune's trial events into MLflow child runs under the
sweep's parent run (see :mod:`lipsweep.tracking` for why the driver, and not the trials,
writes). Its hooks run inside Tune's control loop, which schedules nothing until they return,
so they only queue: metrics, tags and statuses go to the tracker's write buffer, and a
finished trial's checkpoint and Lipschitz artifacts to its background uploader
(:meth:`lipsweep.tracking.Tracker.log_artifacts_later`; the run ends FINISHED once they have
landed). :class:`ConsoleProgress` prints one line per trial event with its state and key
metrics, instead of Tune's full-screen tables, and feeds
:class:`lipsweep.sweep.progress.SweepProgress`
for the status block (counts, ETA, best trial) on stdout.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

from ray.tune import Callback

from lipsweep.core.metric_names import (
    ACC_CLEAN,
    ACC_PREFIX,
    EPOCH_ACC_CLEAN,
    HEADLINE_METRICS,
    LIP_PREFIX,
    LOSS,
    LOSS_CE,
    LOSS_REG,
    attack_metric,
    is_probe_metric,
)
from lipsweep.search.space import SweepSpec
from lipsweep.search.space_display import trial_label
from lipsweep.sweep.handoff import Handoff
from lipsweep.sweep.progress import FAILED as P_FAILED
from lipsweep.sweep.progress import FINISHED as P_FINISHED
from lipsweep.sweep.progress import STOPPED as P_STOPPED
from lipsweep.sweep.progress import SweepProgress
from lipsweep.sweep.trainable import ERROR_KEY, FINAL_KEY, flat_config
from lipsweep.tracking import (
    FAILED,
    FINISHED,
    KILLED,
    TAG_CHECKPOINT,
    TAG_EARLY_STOPPED,
    TAG_FAILURE,
    TAG_STOPPED_BY,
    Tracker,
)
from lipsweep.trial.checkpoint_files import (
    ARTIFACTS,
    FINAL_CONFIG,
    FINAL_METRICS,
    MODEL_FILE,
    STATE_FILE,
)

_log = logging.getLogger("lipsweep.sweep")

EPOCH_KEYS = (
    LOSS,
    LOSS_CE,
    LOSS_REG,
    ACC_CLEAN,
    "lr",
    "epoch_seconds",
    "train_images_per_s",
)
# MLflow names of per-epoch values that would collide with a final contract metric: the held-out
# accuracy after each epoch (all eval_size images) is not the final acc_clean (the images the
# attacks use), and MLflow's latest value, which the UI and `lipsweep pareto` read, must be
# the final one.
EPOCH_MLFLOW_NAMES = {ACC_CLEAN: EPOCH_ACC_CLEAN}
CHECKPOINT_ARTIFACTS = (
    (ARTIFACTS, "lipschitz"),
    (MODEL_FILE, "checkpoint"),
    (FINAL_CONFIG, "checkpoint"),
    (FINAL_METRICS, "checkpoint"),
)
"""What a finished trial's final checkpoint folder gives its MLflow run: (entry, artifact path)."""
MOVED_ARTIFACTS = (ARTIFACTS,)
"""Entries of the final checkpoint that only travel in it (the Lipschitz per-row arrays, up to
750 MB on a ViT-B split): removed from Tune's storage once MLflow has them."""


def epoch_metrics(values: dict[str, Any]) -> dict[str, float]:
    """The per-epoch values of a Tune result (or checkpoint history entry), MLflow-named:
    :data:`EPOCH_KEYS` and the probes (``probe_*``, on the epochs that ran them)."""
    out = {EPOCH_MLFLOW_NAMES.get(k, k): values[k] for k in EPOCH_KEYS if k in values}
    out.update({k: v for k, v in values.items() if is_probe_metric(k)})
    return out


@dataclass
class TrialOutcome:
    """How a trial ended, as the driver saw it."""

    trial_id: str
    label: str
    status: str
    reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    run_id: str = ""
    """Its MLflow child run."""


class MlflowSweepCallback(Handoff, Callback):
    """Logs each Tune trial to its own MLflow child run under ``parent_id``.

    After a driver crash Tune's experiment state can be a few seconds older than MLflow
    (Tune snapshots it at most every 10 s), so ``--resume`` may run again a trial whose
    child run already ended FINISHED (or stopped early). Such a re-run is not logged: the
    MLflow run is the record, and a trial is logged as finished exactly once.
    """

    def __init__(self, tracker: Tracker, parent_id: str, stop_reasons: Any = None) -> None:
        self.tracker = tracker
        self.parent_id = parent_id
        self.stop_reasons = stop_reasons
        """The sweep's scheduler: if it has ``stop_reason(trial_id) -> str | None``, a trial
        it stopped gets that line as its run's ``lipsweep.stopped_by`` tag."""
        self.runs: dict[str, str] = {}
        self.outcomes: dict[str, TrialOutcome] = {}
        self.completed_before: set[str] = set()
        self.logged_before: dict[str, set[str]] = {}
        """Metric keys a resumed trial's still-open child run already holds: a driver killed
        between logging a trial's final metrics and ending its run must not log them twice."""
        self.ends: dict[str, dict[str, Any]] = {}
        """A copy of each trial's final (or error) result, taken when it arrives, before any
        other callback runs: what is logged when the trial completes, whatever a user's
        callback did to Tune's copy (``trial.last_result``) in between."""

    def _run_for(self, trial) -> Optional[str]:
        """The trial's child run, or None if MLflow already holds its completed run."""
        tid = trial.trial_id
        if tid in self.completed_before:
            return None
        if tid not in self.runs:
            found = self.tracker.find_child(self.parent_id, tid)
            if found is not None and _completed(found):
                self.completed_before.add(tid)
                self.outcomes[tid] = TrialOutcome(
                    tid,
                    found.info.run_name or tid,
                    found.info.status,
                    found.data.tags.get(TAG_FAILURE, ""),
                    run_id=found.info.run_id,
                )
                _log.warning(
                    "trial %s already completed in MLflow run %s (%s) before the "
                    "interruption; Tune runs it again, its re-run is not logged",
                    tid,
                    found.info.run_id,
                    found.info.status,
                )
                return None
            if found is not None:
                self.logged_before[tid] = set(found.data.metrics)
            flat = flat_config(trial.config)
            self.runs[tid] = self.tracker.open_child(
                self.parent_id, tid, f"{tid} {trial_label(flat)}", flat
            )
        return self.runs[tid]

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self.tracker.poll()  # end the runs whose artifacts have landed since

    def on_trial_start(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._run_for(trial)

    def on_trial_restore(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self._run_for(trial)

    def on_trial_result(
        self, iteration: int, trials: list, trial, result: dict, **info: Any
    ) -> None:
        if result.get(FINAL_KEY) or ERROR_KEY in result:
            self.ends[trial.trial_id] = copy.deepcopy(result)
            return
        run_id = self._run_for(trial)
        if run_id is None:
            return
        epoch = int(result.get("epoch", 0))
        if epoch > self.tracker.last_step(run_id) + 1:
            self._backfill_epochs(run_id, trial, epoch)
        metrics = epoch_metrics(result)
        metrics["epoch"] = epoch
        self.tracker.log_metrics(run_id, metrics, step=epoch)

    def _backfill_epochs(self, run_id: str, trial, epoch: int) -> None:
        """Log epochs MLflow lacks before ``epoch`` from the history in the trial's restored
        checkpoint: they were reported, but their writes died with an earlier driver (e.g.
        SIGKILLed while MLflow was down and the writes were still buffered)."""
        first = self.tracker.last_step(run_id) + 1
        history: list[dict[str, Any]] = []
        if trial.checkpoint is not None:
            with trial.checkpoint.as_directory() as src:
                state = Path(src) / STATE_FILE
                if state.is_file():
                    history = json.loads(state.read_text()).get("history", [])
        by_epoch = {int(h.get("epoch", 0)): h for h in history}
        missing = [e for e in range(first, epoch) if e not in by_epoch]
        if missing:
            _log.error(
                "trial %s: epochs %s are missing from MLflow and from its checkpoint",
                trial.trial_id,
                missing,
            )
        found = [e for e in range(first, epoch) if e in by_epoch]
        for e in found:
            metrics = epoch_metrics(by_epoch[e])
            self.tracker.log_metrics(run_id, {**metrics, "epoch": e}, step=e)
        if found:
            _log.warning(
                "trial %s: logged epochs %s to MLflow from its checkpoint history",
                trial.trial_id,
                found,
            )

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        kept = self.ends.pop(trial.trial_id, None)
        run_id = self._run_for(trial)
        if run_id is None:
            return
        result = kept or trial.last_result or {}
        label = trial_label(flat_config(trial.config))
        if ERROR_KEY in result:
            self.tracker.set_tags(run_id, {TAG_FAILURE: result[ERROR_KEY]})
            self.tracker.end(run_id, FAILED)
            self.outcomes[trial.trial_id] = TrialOutcome(
                trial.trial_id, label, FAILED, result[ERROR_KEY], run_id=run_id
            )
            return
        if not result.get(FINAL_KEY):
            tags = {TAG_EARLY_STOPPED: "true"}
            why = self._stop_reason(trial.trial_id)
            if why:
                tags[TAG_STOPPED_BY] = why[:5000]
            self.tracker.set_tags(run_id, tags)
            self.tracker.end(run_id, KILLED)
            self.outcomes[trial.trial_id] = TrialOutcome(
                trial.trial_id,
                label,
                KILLED,
                f"stopped early by the scheduler: {why}"
                if why
                else "stopped early by the scheduler",
                run_id=run_id,
            )
            return
        final = {
            k: v
            for k, v in result.items()
            if (k.startswith((ACC_PREFIX, LIP_PREFIX, "eval_")) or k == "epochs_done")
            and isinstance(v, (int, float))
            and not isinstance(v, bool)
        }
        already = self.logged_before.get(trial.trial_id, set())
        self.tracker.log_metrics(
            run_id, {k: v for k, v in final.items() if k not in already}, step=0
        )
        self.tracker.set_tags(run_id, trial_attack_tags(flat_config(trial.config), result))
        self._log_checkpoint(run_id, trial)
        self.tracker.end(run_id, FINISHED)
        self.outcomes[trial.trial_id] = TrialOutcome(
            trial.trial_id, label, FINISHED, metrics=final, run_id=run_id
        )

    def _stop_reason(self, trial_id: str) -> Optional[str]:
        """The scheduler's reason for stopping ``trial_id``, or None. It names trials by
        Tune id, which starts their run names and is their ``lipsweep.trial_id`` tag."""
        ask = getattr(self.stop_reasons, "stop_reason", None)
        return (ask(trial_id) or None) if ask is not None else None

    def on_trial_error(self, iteration: int, trials: list, trial, **info: Any) -> None:
        run_id = self._run_for(trial)
        if run_id is None:
            return
        reason = _error_text(trial)
        self.tracker.set_tags(run_id, {TAG_FAILURE: reason[:5000]})
        self.tracker.end(run_id, FAILED)
        self.outcomes[trial.trial_id] = TrialOutcome(
            trial.trial_id,
            trial_label(flat_config(trial.config)),
            FAILED,
            reason.strip().splitlines()[-1][:300] if reason.strip() else "error",
            run_id=run_id,
        )

    def _log_checkpoint(self, run_id: str, trial) -> None:
        """Queue the upload of the final checkpoint's weights, config, metrics and Lipschitz
        artifacts; it never runs in Tune's loop (a checkpoint on s3:// is fetched by the
        uploader thread too)."""
        ckpt = trial.checkpoint
        if ckpt is None:
            return
        self.tracker.set_tags(run_id, {TAG_CHECKPOINT: ckpt.path})
        self.tracker.log_artifacts_later(
            run_id, checkpoint_uri(ckpt), CHECKPOINT_ARTIFACTS, move=MOVED_ARTIFACTS
        )


def evaluation_plan(flat: dict[str, Any]) -> str:
    """What a trial's final evaluation measures on how many images, from its flat config:
    clean accuracy and the attacks on the first ``attack_images`` of the ``eval_size``
    held-out images (``evaluate_robustness``: robust accuracy counts an image only when it is
    also right clean), ||J_f|| on the first ``lip_images`` (0: all of them)."""
    n = int(flat.get("eval_size") or 0)

    def of(cap: Any) -> str:
        cap = int(cap or 0)
        if cap and not n:  # the whole test split, whose size the driver does not know
            return f"up to {cap} images"
        used = min(cap, n) if cap else n
        return f"{used} images" if used else "all test images"

    from lipsweep.attacks._registry import attack_vocab, is_attack

    def title(attack: str) -> str:  # "autoattack" -> its spec's title "AutoAttack"
        return (attack_vocab(attack).title or attack) if is_attack(attack) else attack

    names = ["clean", *map(title, flat.get("attacks") or ())]
    return f"{', '.join(names)} on {of(flat.get('attack_images'))}; ||J_f|| on " + of(
        flat.get("lip_images")
    )


def checkpoint_uri(ckpt) -> str:
    """Where a Tune checkpoint lives, as a string the uploader (and a spill file) can carry:
    its local path, else ``<filesystem>://<path>`` (``s3://bucket/...``)."""
    import pyarrow.fs as pafs

    if isinstance(ckpt.filesystem, pafs.LocalFileSystem):
        return ckpt.path
    return f"{ckpt.filesystem.type_name}://{ckpt.path}"


def trial_attack_tags(flat: dict[str, Any], result: dict[str, Any]) -> dict[str, str]:
    """Tags saying which AutoAttack made each ``acc_aa_<eps>`` of a trial."""
    from lipsweep.attacks.autoattack_tags import autoattack_tags, describe_config
    from lipsweep.attacks.config import RobustnessConfig
    from lipsweep.settings.config import FIELD_SECTION

    if "autoattack" not in flat.get("attacks", ["autoattack"]):
        return {}
    try:
        robust = RobustnessConfig.from_flat(
            {k: v for k, v in flat.items() if FIELD_SECTION.get(k) == "robustness"}
        )
    except ValueError as err:  # never lose the trial's logging over its tags
        _log.warning("no AutoAttack tags: %s", err)
        return {}
    n = result.get("attack_images")
    tags: dict[str, str] = {}
    for eps in robust.aa_eps:
        tags.update(
            autoattack_tags(
                attack_metric("aa", eps),
                describe_config(robust),
                int(n) if isinstance(n, (int, float)) else None,
                eps,
            )
        )
    return tags


def _completed(run) -> bool:
    """A child run that ended on its own: FINISHED, or stopped early by the scheduler."""
    status = run.info.status
    return status == FINISHED or (
        status == KILLED and run.data.tags.get(TAG_EARLY_STOPPED) == "true"
    )


def _error_text(trial) -> str:
    path = getattr(trial, "error_file", None)
    if path and Path(path).is_file():
        return Path(path).read_text()
    return str(getattr(trial, "error_msg", "") or "worker error")


def first_objective(spec: SweepSpec) -> tuple[str, str]:
    """The objective the status block ranks by: the search's first metric, else acc_clean."""
    if spec.search is not None and spec.search.metric:
        return spec.search.metric[0], spec.search.mode[0]
    return ACC_CLEAN, "max"


class ConsoleProgress(Handoff, Callback):
    """One log line per trial event (state, epoch, key metrics), and the status block on
    ``stream`` every ``status_every`` seconds (0: only at trial ends) and at each trial end."""

    def __init__(
        self,
        total: int,
        objective: tuple[str, str] = (ACC_CLEAN, "max"),
        status_every: float = 30.0,
        stream: Optional[TextIO] = None,
        total_epochs: int = 0,
    ) -> None:
        self.total = total
        self.done = 0
        self.progress = SweepProgress(total, objective, total_epochs=total_epochs)
        self.status_every = status_every
        self.stream = stream
        self._last_status = time.monotonic()
        self._last_lines: list[str] = []
        self._synced = False

    def _out(self) -> TextIO:
        return self.stream or sys.stdout

    def show_status(self, changed_only: bool = False) -> None:
        """Write the status block now; ``changed_only``: unless it repeats the last one."""
        now = time.monotonic()
        self._last_status = now
        out = self._out()
        tty = bool(getattr(out, "isatty", lambda: False)())
        lines = self.progress.status_lines(now, tty)
        if changed_only and lines == self._last_lines:
            return
        self._last_lines = lines
        out.write("\n".join(lines) + "\n")
        out.flush()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if not self._synced:  # trials that ended before a --resume: counted, not timed
            self._synced = True
            for t in trials:
                state = {"TERMINATED": P_FINISHED, "ERROR": P_FAILED}.get(t.status)
                last = getattr(t, "last_result", None)  # Tune's; {} if it never reported
                if (
                    state == P_FINISHED
                    and last
                    and not last.get(FINAL_KEY)
                    and ERROR_KEY not in last
                ):
                    state = P_STOPPED  # ended without its final report: the scheduler stopped it
                    self._saved(t, last)
                if state:
                    self.progress.ended_before(t.trial_id, state, self._name(t), last)
        if self.status_every > 0 and time.monotonic() - self._last_status >= self.status_every:
            self.show_status(changed_only=True)  # a repeated block says nothing new

    def _saved(self, trial, result: dict) -> None:
        """Count the epochs a stopped trial did not run (the status block's compute saved)."""
        full = flat_config(trial.config).get("epochs")
        done = result.get("epoch", 0)  # none: a queued seed the scheduler never started
        if isinstance(done, (int, float)) and isinstance(full, int):
            self.progress.stopped_at(trial.trial_id, int(done), full)

    @staticmethod
    def _name(trial) -> str:
        return f"{trial.trial_id} [{trial_label(flat_config(trial.config))}]"

    def on_trial_start(self, iteration: int, trials: list, trial, **info: Any) -> None:
        _log.info("%s RUNNING", self._name(trial))
        self.progress.started(trial.trial_id, time.monotonic(), self._name(trial))

    def on_trial_restore(self, iteration: int, trials: list, trial, **info: Any) -> None:
        _log.info("%s RESTORED from checkpoint", self._name(trial))
        self.progress.started(trial.trial_id, time.monotonic(), self._name(trial))

    def on_trial_recover(self, iteration: int, trials: list, trial, **info: Any) -> None:
        failures = getattr(getattr(trial, "run_metadata", None), "num_failures", "?")
        _log.warning(
            "%s worker failed (failure %s); RETRYING from its last checkpoint",
            self._name(trial),
            failures,
        )

    def on_trial_result(
        self, iteration: int, trials: list, trial, result: dict, **info: Any
    ) -> None:
        if result.get(FINAL_KEY) or ERROR_KEY in result:
            return
        _log.info(
            "%s epoch %s  loss %.3f  acc_clean %.1f%%",
            self._name(trial),
            result.get("epoch"),
            result.get(LOSS, float("nan")),
            result.get(ACC_CLEAN, float("nan")),
        )
        flat = flat_config(trial.config)
        epoch, epochs = result.get("epoch"), flat.get("epochs")
        last = epoch is not None and epoch == epochs
        evaluating = last and flat.get("evaluate", True)
        if evaluating:
            # the trial's evaluation runs next, with no event until it ends (half a minute
            # on the demo, hours on ViT-B): say so instead of going quiet
            _log.info("%s evaluating: %s", self._name(trial), evaluation_plan(flat))
        if isinstance(epoch, int) and isinstance(epochs, int):
            now = time.monotonic()
            self.progress.epoch_done(trial.trial_id, epoch, epochs, now, bool(evaluating))

    def on_trial_complete(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self.done += 1
        r = trial.last_result or {}
        if ERROR_KEY in r:
            _log.error("%s FAILED: %s", self._name(trial), r[ERROR_KEY])
            state = P_FAILED
        elif not r.get(FINAL_KEY):
            _log.info(
                "%s STOPPED early (scheduler)  [%d/%d]", self._name(trial), self.done, self.total
            )
            state = P_STOPPED
            self._saved(trial, r)
        else:
            text = "  ".join(f"{k} {r[k]:.2f}" for k in HEADLINE_METRICS if k in r)
            _log.info("%s FINISHED  %s  [%d/%d]", self._name(trial), text, self.done, self.total)
            state = P_FINISHED
        self.progress.ended(trial.trial_id, state, time.monotonic(), r, self._name(trial))
        self.show_status()

    def on_trial_error(self, iteration: int, trials: list, trial, **info: Any) -> None:
        self.done += 1
        _log.error(
            "%s ERROR (retries exhausted)  [%d/%d]", self._name(trial), self.done, self.total
        )
        self.progress.ended(trial.trial_id, P_FAILED, time.monotonic(), None, self._name(trial))
        self.show_status()


def outcome_counts(outcomes: dict[str, TrialOutcome], total: int) -> dict[str, int]:
    """finished, stopped (early, by the scheduler), failed, not_run and total."""
    status = [o.status for o in outcomes.values()]
    return {
        "finished": status.count(FINISHED),
        "stopped": status.count(KILLED),
        "failed": status.count(FAILED),
        "not_run": max(0, total - len(outcomes)),
        "total": total,
    }


def summarize(outcomes: dict[str, TrialOutcome], total: int) -> tuple[bool, str]:
    """(all finished?, a summary listing failures)."""
    failed = [o for o in outcomes.values() if o.status == FAILED]
    n = outcome_counts(outcomes, total)
    lines = [
        f"{n['finished']} finished, {n['stopped']} stopped early, {n['failed']} failed, "
        f"{n['not_run']} not run, of {total} trials"
    ]
    lines += [f"  FAILED {o.trial_id} [{o.label}]: {o.reason}" for o in failed]
    ok = not failed and len(outcomes) >= total
    return ok, "\n".join(lines)
