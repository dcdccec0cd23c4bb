"""The names of the files in a trial's checkpoint folder, which epochs checkpoint, and the rule
that none of them is a link, in one place that imports only the standard library (the sweep
driver reads checkpoints on storage without loading torch).

Every checkpoint (:mod:`lipsweep.trial.checkpoint`) holds :data:`STATE_FILE` and the
safetensors of :data:`WEIGHT_FILES`; a finished trial's final checkpoint
(:mod:`lipsweep.sweep.trainable`) adds :data:`FINAL_METRICS`, :data:`FINAL_CONFIG` and the
Lipschitz arrays under :data:`ARTIFACTS`."""

from __future__ import annotations

import os
import stat
from typing import Optional

STATE_FILE = "state.json"
"""Epoch, per-epoch history, trial config and the weights' checksums and sizes."""
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
REGULARIZER_FILE = "regularizer.safetensors"
WEIGHT_FILES = (MODEL_FILE, OPTIMIZER_FILE, REGULARIZER_FILE)
FINAL_METRICS = "metrics.json"
"""The file that makes a checkpoint a trial's final one: its final metrics, reported again
on resume instead of evaluating twice."""
FINAL_CONFIG = "config.json"
"""A final checkpoint's trial config, to tell whether it is this trial's."""
ARTIFACTS = "artifacts"
"""A final checkpoint's folder of per-row Lipschitz arrays."""


def irregular(folder: str) -> Optional[str]:
    """The first entry under the local ``folder`` (at any depth) that is a symbolic link or
    neither a regular file nor a folder, relative to it; None if there is none. A checkpoint
    holding one is not restored: copying it would follow the link (a weights file linked to
    ``/dev/zero`` fills the disk)."""
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            path = os.path.join(top, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                return os.path.relpath(path, folder)
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                return os.path.relpath(path, folder)
    return None


def checkpoint_due(epoch: int, epochs: int, every: int) -> bool:
    """Whether epoch ``epoch`` (1-based) of ``epochs`` is checkpointed: every ``every``-th and
    always the last."""
    return epoch % every == 0 or epoch == epochs
