"""A resumed trial restores from a checkpoint that exists, not one Tune's snapshot names.

Tune deletes a trial's oldest checkpoint (``CheckpointConfig(num_to_keep)``) the moment it
registers a new one, and writes the experiment snapshot that ``--resume`` reads only on a
later step of its loop. A driver killed in between leaves a snapshot that names a deleted
checkpoint, and Tune fails that trial on resume ("Could not recover from checkpoint as it does
not exist on storage anymore"). :class:`CheckpointRepair` runs at the start of each step of
Tune's loop, before Tune starts a trial: a trial whose recorded checkpoints are not all on
storage gets its checkpoint list rebuilt from the ones that are whole (a ``state.json`` and
every file its checksums name; the trial restores from the newest, and its loader verifies the
checksums), and its checkpoint index is moved past every checkpoint folder, so that a new
checkpoint never lands in an old one's. Their metrics are those Tune's ``result.json`` on
storage holds (empty for a checkpoint newer than its last sync). With no whole checkpoint left
the trial starts over.

The same window makes a finished trial run again: a trial whose final checkpoint (with its
``metrics.json``, :data:`lipsweep.trial.checkpoint_files.FINAL_METRICS`) reached storage after the
snapshot would train on from the snapshot's epoch and run its final evaluation twice. When
the newest whole checkpoint on storage is such a final one, newer than every recorded one,
the list is rebuilt the same way; the trainable then reports that checkpoint again
(:func:`lipsweep.sweep.trainable.restore_checkpoint`). A newer *epoch* checkpoint is left
alone: the recorded one is intact, and a newer folder may be a copy cut short.

Tune has no public API for a trial's checkpoint list: this module is the one place that
builds ``ray.train._internal``'s ``_CheckpointManager`` (Ray pinned by uv.lock; the test
drives the installed one).
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Optional

import pyarrow.fs as pafs
from ray.train import Checkpoint
from ray.train._internal.checkpoint_manager import _CheckpointManager
from ray.train._internal.session import _TrainingResult
from ray.tune import Callback
from ray.tune.experiment import Trial

from lipsweep.trial.checkpoint_files import FINAL_METRICS, STATE_FILE

_log = logging.getLogger("lipsweep.sweep")
_CKPT_DIR = re.compile(r"checkpoint_\d{6}")


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def _reported(trial: Trial) -> dict[str, dict[str, Any]]:
    """``checkpoint dir name -> the result Tune recorded with it``, from the ``result.json``
    on storage (synced with each snapshot, so it may lack the newest)."""
    fs = trial.storage.storage_filesystem
    try:
        with fs.open_input_stream(f"{trial.storage.trial_fs_path}/result.json") as f:
            text = f.readall().decode()
    except OSError:  # FileNotFoundError included
        return {}
    rows: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut short
            continue
        name = row.get("checkpoint_dir_name") if isinstance(row, dict) else None
        if name:
            rows[name] = row
    return rows


def _whole(fs: pafs.FileSystem, path: str) -> bool:
    """``path`` holds a ``state.json`` and every file its ``sha256`` record names (a
    checkpoint copied only in part, by a worker killed with its driver, does not)."""
    try:
        with fs.open_input_stream(f"{path}/{STATE_FILE}") as f:
            names = json.loads(f.readall()).get("sha256", {})
        present = {i.base_name for i in fs.get_file_info(pafs.FileSelector(path))}
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(names, dict) and bool(names) and set(names) <= present


def _on_storage(
    trial: Trial, newer_than: Optional[int] = None
) -> tuple[list[str], list[_TrainingResult]]:
    """The names of the trial's ``checkpoint_NNNNNN`` folders on storage, and the whole
    ones as Tune results (with the metrics ``result.json`` has for them), oldest first.
    ``newer_than``: nothing unless some folder's number is above it (nothing read but the
    listing)."""
    fs = trial.storage.storage_filesystem
    root = trial.storage.trial_fs_path
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    except OSError:
        return [], []
    names = sorted(
        i.base_name
        for i in infos
        if i.type == pafs.FileType.Directory and _CKPT_DIR.fullmatch(i.base_name)
    )
    if newer_than is not None and not (names and _index(names[-1]) > newer_than):
        return [], []
    rows = _reported(trial) if names else {}
    whole = [
        _TrainingResult(
            checkpoint=Checkpoint(f"{root}/{n}", filesystem=fs), metrics=rows.get(n, {})
        )
        for n in names
        if _whole(fs, f"{root}/{n}")
    ]
    return names, whole


def _index(path: str) -> int:
    """The number of a ``.../checkpoint_NNNNNN`` folder."""
    return int(path.rstrip("/").rsplit("_", 1)[1])


def repair(trial: Trial) -> Optional[str]:
    """Rebuild ``trial``'s checkpoint list if a checkpoint it records is gone, or if a whole
    final checkpoint newer than every recorded one is on storage (the trial ended after
    Tune's last snapshot: it restores from that one and reports it again, instead of training
    on from an older epoch); returns a line saying what changed, or None otherwise."""
    manager = trial.run_metadata.checkpoint_manager
    latest = manager.latest_checkpoint_result
    if latest is None:
        return None
    fs = trial.storage.storage_filesystem
    recorded = {r.checkpoint.path for r in [*manager.best_checkpoint_results, latest]}
    gone = sorted(p for p in recorded if not _exists(fs, p))
    at = _index(latest.checkpoint.path)
    names, found = _on_storage(trial, newer_than=None if gone else at)
    if not gone and not (
        found
        and _index(found[-1].checkpoint.path) > at
        and _exists(fs, f"{found[-1].checkpoint.path}/{FINAL_METRICS}")
    ):
        return None
    fresh = _CheckpointManager(manager.checkpoint_config)
    for result in found:  # oldest first: Tune's own num_to_keep applies
        fresh.register_checkpoint(result)
    trial.run_metadata.checkpoint_manager = fresh
    trial.run_metadata.invalidate_cache()
    if names:  # the snapshot's index is stale too: new checkpoints go past every folder
        last = _index(names[-1])
        trial.storage.current_checkpoint_index = max(trial.storage.current_checkpoint_index, last)
        trial.invalidate_json_state()
    newest = found[-1].checkpoint.path.rsplit("/", 1)[-1] if found else None
    if not gone:
        was = latest.checkpoint.path.rsplit("/", 1)[-1]
        return (
            f"trial {trial.trial_id}: its final checkpoint {newest} was written after Tune's "
            f"last snapshot (which names {was}); it reports that one again, not training on"
        )
    gone_names = ", ".join(p.rsplit("/", 1)[-1] for p in gone)
    if newest is None:
        return (
            f"trial {trial.trial_id}: its checkpoints ({gone_names}) were deleted after Tune's "
            "last snapshot and no whole one is left; it starts again from epoch 1"
        )
    return (
        f"trial {trial.trial_id}: Tune's last snapshot names {gone_names}, deleted after it; "
        f"resuming from {newest}, the newest whole one"
    )


class CheckpointRepair(Callback):
    """Tune callback: :func:`repair` each trial once, before Tune first starts it."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        for trial in trials:
            if trial.trial_id in self._seen:
                continue
            self._seen.add(trial.trial_id)
            if trial.status in (Trial.PENDING, Trial.PAUSED):
                line = repair(trial)
                if line:
                    _log.warning(line)
