"""A resumed trial restores from a checkpoint that exists, not one Tune's snapshot names.

Tune deletes a trial's oldest checkpoint (``CheckpointConfig(num_to_keep)``) the moment it
registers a new one, and writes the experiment snapshot that ``--resume`` reads only on a
later step of its loop. A driver killed in between leaves a snapshot that names a deleted
checkpoint, and Tune fails that trial on resume ("Could not recover from checkpoint as it does
not exist on storage anymore"). :class:`CheckpointRepair` runs at the start of each step of
Tune's loop, before Tune starts a trial: a trial whose recorded checkpoints are not all whole on
storage gets its checkpoint list rebuilt from the ones that are, and restores from the newest.
Whole means a ``state.json`` and every file its checksums name, each of the size and SHA-256
it records: Tune's upload writes a folder's files on several threads, so a driver killed
mid-upload leaves a folder with every name and some bytes missing. Deciding whether to
repair reads only listings (names, sizes, links); the checksums are read, streamed, when a
list is rebuilt. Their metrics are those Tune's ``result.json`` on storage holds (empty for a
checkpoint newer than its last sync). With no whole checkpoint left the trial starts over.
In every case the trial's checkpoint index is moved past every checkpoint folder, so that a
new checkpoint never lands in an old one's.

The same window makes a finished trial run again: a trial whose final checkpoint (with its
``metrics.json``, :data:`lipsweep.trial.checkpoint_files.FINAL_METRICS`) reached storage after the
snapshot would train on from the snapshot's epoch and run its final evaluation twice. When
the newest whole checkpoint on storage is such a final one, newer than every recorded one,
the list is rebuilt the same way, also where the snapshot records no checkpoint (``epochs:
1``, or ``checkpoint_every`` >= epochs: the final is the only one); the trainable then reports
that checkpoint again (:func:`lipsweep.sweep.trainable.restore_checkpoint`). A newer *epoch*
checkpoint is left alone while the recorded one is whole. Where the snapshot records none, or
its recorded ones are gone, the newest whole one is taken, except the newest folder when it is
an epoch checkpoint with no row in ``result.json``: its result may not have reached the driver
(a SIGINT lands between the worker's upload and the driver's processing), and a trial resumed
past it would leave that epoch out of the searcher's intermediate values and the scheduler's
rungs. Passing over it repeats at most ``checkpoint_every`` epochs.

Tune has no public API for a trial's checkpoint list: this module is the one place that
builds one, through :mod:`lipsweep.sweep.ray_internals` (the test drives the installed Ray).
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, Any, Optional

import pyarrow.fs as pafs
from ray.train import Checkpoint
from ray.tune import Callback
from ray.tune.experiment import Trial

from lipsweep.core.digest import stream_sha256
from lipsweep.sweep import ray_internals
from lipsweep.trial.checkpoint_files import (
    FINAL_METRICS,
    STATE_FILE,
    WEIGHT_FILES,
    irregular,
)

if TYPE_CHECKING:
    from lipsweep.sweep.ray_internals import TrainingResult

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


def _sha256(fs: pafs.FileSystem, path: str) -> str:
    """SHA-256 of the file at ``path`` on ``fs``, streamed."""
    with fs.open_input_stream(path) as f:
        return stream_sha256(f)


def _whole(fs: pafs.FileSystem, path: str, verify: bool = True) -> bool:
    """``path`` holds a ``state.json`` and every file its ``sha256`` record names (the
    weights files included), each a regular file of the size ``sizes`` records and, with
    ``verify``, of the recorded checksum; on local storage nothing in it is a link. A
    checkpoint copied only in part (a worker killed with its driver, an upload cut short:
    Tune's upload writes a folder's files on several threads, so every name can exist before
    the bytes do) is not whole. Without ``verify`` only the listing is read."""
    try:
        with fs.open_input_stream(f"{path}/{STATE_FILE}") as f:
            state = json.loads(f.readall())
        digests, sizes = state.get("sha256"), state.get("sizes", {})
        if not (isinstance(digests, dict) and set(WEIGHT_FILES) <= set(digests)) or not isinstance(
            sizes, dict
        ):
            return False
        found = {i.base_name: i for i in fs.get_file_info(pafs.FileSelector(path))}
        if isinstance(fs, pafs.LocalFileSystem) and irregular(path) is not None:
            return False
        for name, digest in digests.items():
            info = found.get(name)
            if info is None or info.type != pafs.FileType.File:
                return False
            if sizes.get(name) is not None and info.size != sizes[name]:
                return False
            if verify and _sha256(fs, f"{path}/{name}") != digest:
                return False
    except (OSError, ValueError, AttributeError, TypeError):
        return False
    return True


def _final(fs: pafs.FileSystem, path: str) -> bool:
    """``path`` is a trial's final checkpoint: its ``metrics.json`` holds a JSON object."""
    try:
        with fs.open_input_stream(f"{path}/{FINAL_METRICS}") as f:
            return isinstance(json.loads(f.readall()), dict)
    except (OSError, ValueError):
        return False


def _folders(trial: Trial) -> list[str]:
    """The names of the trial's ``checkpoint_NNNNNN`` folders on storage, oldest first."""
    fs = trial.storage.storage_filesystem
    try:
        infos = fs.get_file_info(
            pafs.FileSelector(trial.storage.trial_fs_path, allow_not_found=True)
        )
    except OSError:
        return []
    return sorted(
        i.base_name
        for i in infos
        if i.type == pafs.FileType.Directory and _CKPT_DIR.fullmatch(i.base_name)
    )


def _whole_ones(trial: Trial, names: list[str]) -> list[TrainingResult]:
    """The whole checkpoints among the folders ``names``, as Tune results (with the metrics
    ``result.json`` has for them), oldest first."""
    fs = trial.storage.storage_filesystem
    root = trial.storage.trial_fs_path
    rows = _reported(trial) if names else {}
    return [
        ray_internals.training_result(Checkpoint(f"{root}/{n}", filesystem=fs), rows.get(n, {}))
        for n in names
        if _whole(fs, f"{root}/{n}")
    ]


def _index(path: str) -> int:
    """The number of a ``.../checkpoint_NNNNNN`` folder."""
    return int(path.rstrip("/").rsplit("_", 1)[1])


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def _past_every_folder(trial: Trial, names: list[str]) -> None:
    """Move the trial's checkpoint index past every folder on storage: the snapshot's may be
    stale, and a new checkpoint must never land in an old one's folder."""
    if names and _index(names[-1]) > trial.storage.current_checkpoint_index:
        trial.storage.current_checkpoint_index = _index(names[-1])
        trial.invalidate_json_state()


def _rebuild(trial: Trial, found: list[TrainingResult]) -> None:
    """Give ``trial`` a checkpoint list of ``found`` (oldest first: Tune's own num_to_keep
    applies); it restores from the last."""
    fresh = ray_internals.checkpoint_manager(
        trial.run_metadata.checkpoint_manager.checkpoint_config
    )
    for result in found:
        fresh.register_checkpoint(result)
    trial.run_metadata.checkpoint_manager = fresh
    trial.run_metadata.invalidate_cache()
    trial.invalidate_json_state()


def _maybe_unseen(result: TrainingResult, newest: str, at: int) -> bool:
    """``result`` is the newest checkpoint folder on storage, newer than the snapshot's latest
    (index ``at``), and ``result.json`` has no row for it: the worker uploads a checkpoint
    before the driver processes its result, and runs its next epoch only after, so this one
    checkpoint's result may never have reached the searcher, the scheduler or MLflow."""
    path = result.checkpoint.path
    return _name(path) == newest and _index(path) > at and not result.metrics


def repair(trial: Trial) -> Optional[str]:
    """Rebuild ``trial``'s checkpoint list if a checkpoint it records is gone or cut short, or
    if a whole final checkpoint newer than every recorded one is on storage (the trial ended
    after Tune's last snapshot: it restores from that one and reports it again, instead of
    training on from an older epoch, or from epoch 1 where the snapshot records none); returns
    a line saying what changed, or None otherwise. The newest folder on storage, when it is
    an epoch checkpoint newer than every recorded one with no row in ``result.json``, is never
    taken (:func:`_maybe_unseen`); resuming before it repeats at most ``checkpoint_every``
    epochs. The checkpoint index moves past every folder on storage either way."""
    manager = trial.run_metadata.checkpoint_manager
    latest = manager.latest_checkpoint_result
    fs = trial.storage.storage_filesystem
    names = _folders(trial)
    _past_every_folder(trial, names)
    at = -1 if latest is None else _index(latest.checkpoint.path)
    recorded = (
        set()
        if latest is None
        else {r.checkpoint.path for r in [*manager.best_checkpoint_results, latest]}
    )
    bad = sorted(p for p in recorded if not _exists(fs, p) or not _whole(fs, p, verify=False))
    if not bad and not (names and _index(names[-1]) > at):
        return None
    found = _whole_ones(trial, names)
    newer_final = (
        bool(found)
        and _index(found[-1].checkpoint.path) > at
        and _final(fs, found[-1].checkpoint.path)
    )
    if not bad and latest is not None and not newer_final:
        return None  # a newer epoch checkpoint is left alone: the recorded one is whole
    kept = [r for r in found if not _maybe_unseen(r, names[-1], at) or newer_final]
    if len(kept) < len(found):
        _log.info(
            "trial %s: passing over %s, written after the last result Tune recorded (the "
            "searcher and the scheduler may not have seen that epoch); that epoch runs again",
            trial.trial_id,
            names[-1],
        )
    if not bad and not kept:
        return None
    _rebuild(trial, kept)
    newest = _name(kept[-1].checkpoint.path) if kept else None
    if not bad:
        names_then = (
            "records no checkpoint" if latest is None else f"names {_name(latest.checkpoint.path)}"
        )
        if newer_final:
            return (
                f"trial {trial.trial_id}: its final checkpoint {newest} was written after "
                f"Tune's last snapshot (which {names_then}); it reports that one again, not "
                "training on"
            )
        return (
            f"trial {trial.trial_id}: Tune's last snapshot {names_then}, but {newest} reached "
            "storage after it; resuming from it"
        )
    bad_names = ", ".join(_name(p) for p in bad)
    if newest is None:
        return (
            f"trial {trial.trial_id}: its checkpoints ({bad_names}) were deleted or cut short "
            "after Tune's last snapshot and no whole one is left; it starts again from epoch 1"
        )
    return (
        f"trial {trial.trial_id}: Tune's last snapshot names {bad_names}, deleted or cut "
        f"short after it; resuming from {newest}, the newest whole one"
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
