"""The family's Ray Tune adapter: a pure decision core as a real Tune ``TrialScheduler``
(:func:`create_tune_scheduler`, what the sweep driver runs).

A core is a scheduler member of the search protocol (:mod:`lipsweep.search.protocol`; for
example :class:`lipsweep.search.schedulers.moasha.MoAsha`): ``add``,
``decide(trial, group, t, metrics) -> "continue" | "stop"``, ``report(trial)``, ``reason``,
``metrics``, ``changes`` (a counter), ``state()`` and ``from_state``. :class:`CoreScheduler`
feeds it Tune's trial events (trial id, the configuration of the trial's seeds, or the trial
itself for a per-trial scheduler, the ``epoch`` of the report, the values of its metrics and
their ``<metric>_se`` where the trial reports one) and returns its decisions; the replay
benchmark (:mod:`lipsweep.search.replay`) drives the same core, with the same grouping,
without Ray (:class:`lipsweep.search.schedulers.cores.Decider`). The core sees only results,
so it works under every searcher.

Resume: Tune keeps no scheduler state in its experiment checkpoint (Ray 2.60 pickles the
scheduler once, when the sweep starts), so after each change the core's state is written
(atomically) to ``state_path`` (``<storage>/.<experiment>.lipsweep_scheduler.json``, beside
the experiment folder: :func:`lipsweep.search.schedulers.state_path` says why), and read back
the first time a resumed sweep uses the scheduler (``restore``, or a scheduler that Tune
unpickled).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Mapping, Optional

from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from lipsweep.core.metric_names import se_metric
from lipsweep.core.storage import read_text, write_text
from lipsweep.search.schedulers import SchedulerContext, create_scheduler
from lipsweep.search.schedulers.cores import Decider
from lipsweep.sweep.handoff import Handoff
from lipsweep.sweep.trainable import ERROR_KEY, FINAL_KEY

_log = logging.getLogger("lipsweep.sweep")
TIME_ATTR = "epoch"


def _flat(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Tune's config -> the flat trial dict (grid sweeps nest it under ``trial``)."""
    inner = config.get("trial")
    return inner if isinstance(inner, Mapping) else config


class CoreScheduler(Handoff, FIFOScheduler):
    """Tune runs trials first in, first out; ``core`` decides which to stop.

    ``group_of(flat_config)`` names the configuration whose seeds are judged together (None:
    each trial is judged alone).
    ``skip_keys``: a report carrying one of them (lipsweep's final evaluation report, or its
    error report) is not a per-epoch result and is not shown to the core.
    """

    def __init__(
        self,
        core: Any,
        group_of: Optional[Callable[[Mapping[str, Any]], str]],
        state_path: Optional[str] = None,
        skip_keys: tuple[str, ...] = ("lipsweep_final", "lipsweep_error"),
        restore: bool = False,
    ) -> None:
        super().__init__()
        self.core = core
        self.group_of = group_of
        self.state_path = state_path
        self.skip_keys = skip_keys
        self._loaded = not (restore and state_path)

    # -- state ---------------------------------------------------------------------------
    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._loaded = self.state_path is None  # restored by Tune: read the saved state

    def _ready(self) -> Any:
        if not self._loaded:
            self._loaded = True
            text = read_text(self.state_path) if self.state_path else None
            if text:
                self.core = type(self.core).from_state(json.loads(text))
                _log.info("scheduler state restored from %s", self.state_path)
        return self.core

    def _save(self) -> None:
        if self.state_path:
            write_text(self.state_path, json.dumps(self.core.state()))

    def group(self, trial_id: str, flat: Mapping[str, Any]) -> str:
        """The configuration ``trial_id`` (of flat config ``flat``) is judged with."""
        return trial_id if self.group_of is None else self.group_of(flat)

    # -- Tune's events -------------------------------------------------------------------
    def set_search_properties(self, metric: Optional[str], mode: Optional[str], **spec) -> bool:
        return True  # the core has its own objectives; Tune's metric/mode are the searcher's

    def on_trial_add(self, tune_controller, trial) -> None:
        core = self._ready()
        before = core.changes
        core.add(trial.trial_id, self.group(trial.trial_id, _flat(trial.config)))
        if core.changes != before:
            self._save()

    def choose_trial_to_run(self, tune_controller) -> Any:
        """FIFO, after ending every queued seed of a configuration the core has stopped: it
        never starts (Tune's ``stop_trial`` on a PENDING trial tells the searcher and the
        callbacks it completed, with no result, and the trial ends TERMINATED)."""
        core = self._ready()
        before = core.changes
        for trial in tune_controller.get_trials():
            if trial.status != "PENDING":
                continue
            group = self.group(trial.trial_id, _flat(trial.config))
            if core.decide(trial.trial_id, group, 0, {}) == "stop":
                _log.info(
                    "%s not started: %s",
                    trial.trial_id,
                    self.stop_reason(trial.trial_id) or "stopped",
                )
                trial.init_local_path()  # its folder: Tune's results list every trial
                tune_controller.stop_trial(trial)
        if core.changes != before:
            self._save()
        return super().choose_trial_to_run(tune_controller)

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        core = self._ready()
        if TIME_ATTR not in result or any(k in result for k in self.skip_keys):
            return TrialScheduler.CONTINUE
        group = self.group(trial.trial_id, _flat(trial.config))
        before = core.changes
        # each metric with the standard error a probe logs beside it (``<metric>_se``): with
        # one seed it is the only noise a noise-aware core has
        values = {k: result.get(k) for m in core.metrics for k in (m, se_metric(m))}
        decision = core.decide(trial.trial_id, group, result[TIME_ATTR], values)
        if core.changes != before:
            self._save()
        if decision == "stop":
            _log.info("%s stopped: %s", trial.trial_id, self.stop_reason(trial.trial_id) or "")
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def _ended(self, trial) -> None:
        self._ready().report(trial.trial_id)
        self._save()

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self._ended(trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self._ended(trial)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self._ended(trial)

    # -- what the driver's callbacks read ------------------------------------------------
    def stop_reason(self, trial_id: str) -> Optional[str]:
        """Why the scheduler stopped ``trial_id`` (one line), or None."""
        reason = self._ready().reason(trial_id)
        return reason.text() if reason is not None else None

    def debug_string(self) -> str:
        core = self._ready()
        return f"{type(core).__name__}: {len(getattr(core, 'stopped', {}))} configurations stopped"


def create_tune_scheduler(settings: Any, ctx: Optional[SchedulerContext] = None) -> Any:
    """The Ray Tune ``TrialScheduler`` of validated scheduler ``settings``: the member's
    :class:`Decider` in a :class:`CoreScheduler` (its state kept at ``ctx.state_path``), or
    the ``TrialScheduler`` a plugin's factory returned, as is."""
    ctx = ctx or SchedulerContext()
    built = create_scheduler(settings, ctx)
    if not isinstance(built, Decider):
        return built
    return CoreScheduler(
        built.core,
        built.group_of,
        state_path=ctx.state_path,
        skip_keys=(FINAL_KEY, ERROR_KEY),
        restore=ctx.resume,
    )
