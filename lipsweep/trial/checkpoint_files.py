"""The names of the files in a trial's checkpoint folder, and which epochs checkpoint, in one
place that imports nothing (the sweep driver reads checkpoints on storage without loading
torch).

Every checkpoint (:mod:`lipsweep.trial.checkpoint`) holds :data:`STATE_FILE` and the
safetensors of :data:`WEIGHT_FILES`; a finished trial's final checkpoint
(:mod:`lipsweep.sweep.trainable`) adds :data:`FINAL_METRICS`, :data:`FINAL_CONFIG` and the
Lipschitz arrays under :data:`ARTIFACTS`."""

STATE_FILE = "state.json"
"""Epoch, per-epoch history, trial config and the weights' checksums."""
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


def checkpoint_due(epoch: int, epochs: int, every: int) -> bool:
    """Whether epoch ``epoch`` (1-based) of ``epochs`` is checkpointed: every ``every``-th and
    always the last."""
    return epoch % every == 0 or epoch == epochs
