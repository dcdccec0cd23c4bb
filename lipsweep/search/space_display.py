"""How a space's trials are shown: a trial's short label (the driver's lines, MLflow run
names, errors) and the recipe block ``--dry-run`` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lipsweep.regularizers import find_spec
from lipsweep.settings.config import TrialConfig

if TYPE_CHECKING:
    from lipsweep.search.space import SweepSpec


def trial_label(flat: dict[str, Any]) -> str:
    """Short human label of a trial's regularizer settings (its spec's ``label``, e.g.
    ``<name> k=v ...``), then the seed."""
    reg = flat.get("regularizer", "none")
    spec = find_spec(reg)
    core = spec.label(flat) if spec is not None else str(reg)
    return core.strip() + (f" seed={flat['seed']}" if "seed" in flat else "")


RECIPE_KEYS = (
    "model",
    "pretrained",
    "patch_resample",
    "normalization",
    "img_size",
    "patch_size",
    "qkv_bias",
    "dataset",
    "eval_size",
    "epochs",
    "batch_size",
    "optimizer",
    "lr",
    "min_lr",
    "warmup_epochs",
    "momentum",
    "weight_decay",
    "weight_decay_scope",
    "clip_grad",
    "mixup",
    "cutmix",
    "mix_prob",
    "label_smoothing",
    "crop_padding",
    "hflip",
    "pgd_steps",
    "pgd_step_size",
    "pgd_random_start",
    "attack_images",
    "lip_images",
)
"""The training and evaluation recipe settings ``--dry-run`` prints (docs/science.md)."""


def _recipe_value(key: str, value: Any) -> str:
    if key == "pgd_step_size":
        if value is None:
            return "2.5 * eps / pgd_steps"
        if abs(value * 255 - round(value * 255)) < 1e-9:
            return f"{round(value * 255)}/255"
    if key in ("eval_size", "attack_images", "lip_images") and value == 0:
        return "0 (all)"
    return "''" if value == "" else str(value)


def recipe_lines(spec: SweepSpec) -> list[str]:
    """The recipe every trial runs, one block (defaults filled in); settings that differ
    between trials are marked ``(varies)``. Optuna spaces show their fixed settings."""
    trials = spec.trials or [{**TrialConfig().to_flat(), **spec.fixed}]
    lines = ["recipe (every trial; docs/science.md gives each setting's source):"]
    for key in RECIPE_KEYS:
        values = {repr(t.get(key)) for t in trials}
        shown = "(varies)" if len(values) > 1 else _recipe_value(key, trials[0].get(key))
        lines.append(f"  {key:<20} {shown}")
    return lines
