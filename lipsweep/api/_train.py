"""``train``: one trial, without Ray or MLflow, into a folder it may resume from."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from lipsweep.api.options import TRAIN_OUT, TrainOptions
from lipsweep.api.results import TrainResult
from lipsweep.core.config_base import UsageError
from lipsweep.core.paths import check_folder, check_replaceable, shown_path, write_atomic

_log = logging.getLogger("lipsweep")

TRAIN_MARKER = ".lipsweep-train"
"""Written into every folder ``train`` creates; ``overwrite`` deletes only such a one."""
TRAIN_WHAT = "a folder `lipsweep train` made"


def run(opts: TrainOptions) -> TrainResult:
    """Validate the config and the folder, then train and evaluate (resuming if it can)."""
    from lipsweep.settings.config import TrialConfig, parse_override

    overrides = dict(parse_override(o) for o in opts.overrides)
    if isinstance(opts.config, TrialConfig):
        cfg = TrialConfig.from_flat({**opts.config.to_flat(), **overrides}, source="config")
    elif opts.config:
        cfg = TrialConfig.from_yaml(opts.config, overrides)
    else:
        cfg = TrialConfig.from_flat(overrides, source="overrides")
    cfg.model.validate_name()
    out = check_folder("--out", opts.out, make_parents=opts.out == TRAIN_OUT)
    if opts.overwrite:
        check_replaceable("--out", out, TRAIN_MARKER, TRAIN_WHAT)
    check_out_config(out, cfg.to_flat(), opts.overwrite)
    from lipsweep.data.remote import cache_root, fetch_prepared, is_uri

    remote = is_uri(cfg.data.data_dir)
    if remote:
        cache_root()  # $LIPSWEEP_DATA_CACHE checked before the manifest is read
    from lipsweep.trial.device import choose_device

    choose_device(cfg.run.device)  # device: cuda without CUDA is a ConfigError here; logged
    if remote:  # a missing remote dataset is refused before anything is written
        fetch_prepared(cfg.data.data_dir, cfg.data.dataset)
    from lipsweep.data.loading import load_splits
    from lipsweep.trial.run import run_trial

    splits = load_splits(cfg.data, cfg.model.num_classes)  # checked before anything is written
    _log.info(
        "training %s on %s, regularizer %s, %d epochs -> %s",
        cfg.model.model,
        cfg.data.dataset,
        cfg.regularizer.regularizer,
        cfg.optim.epochs,
        shown_path(out),
    )
    prepare_out(out, cfg.to_json(), opts.overwrite)
    result = run_trial(cfg, out, splits=splits)
    return TrainResult(out, dict(result.metrics), result.resumed_from_epoch)


def check_out_config(out: Path, flat: dict, overwrite: bool) -> None:
    """Refuse to resume into ``out`` if it holds a run of a different config (unless
    ``overwrite``): its checkpoint would silently be trained or evaluated under this one.
    The checkpoints carry their config's hash, so this holds without ``config.json`` too."""
    if overwrite:
        return
    from lipsweep.trial.checkpoint import foreign_checkpoint

    if foreign := foreign_checkpoint(out / "checkpoints", flat):
        raise UsageError(
            f"--out {out} holds a checkpoint of a different config: {foreign}; pass "
            "--overwrite to start over, or choose another --out"
        )
    saved_file = out / "config.json"
    if not saved_file.is_file():
        return
    try:
        saved = json.loads(saved_file.read_text())
    except (OSError, ValueError) as err:
        raise UsageError(
            f"--out: cannot read {saved_file} ({err}); pass --overwrite to start over"
        ) from None
    if not isinstance(saved, dict):
        raise UsageError(f"--out: {saved_file} is not a config; pass --overwrite to start over")
    flat = json.loads(json.dumps(flat))  # tuples -> lists, as saved
    differ = sorted(k for k in set(saved) | set(flat) if saved.get(k) != flat.get(k))
    if differ:
        shown = ", ".join(f"{k} ({saved.get(k)!r} -> {flat.get(k)!r})" for k in differ[:6])
        more = f" and {len(differ) - 6} more" if len(differ) > 6 else ""
        raise UsageError(
            f"--out {out} holds a run of a different config: {shown}{more}; "
            "pass --overwrite to start over, or choose another --out"
        )


def prepare_out(out: Path, config_json: str, overwrite: bool) -> None:
    """Create ``out`` and write the trial's config.json. With ``overwrite`` a previous train
    folder (one holding :data:`TRAIN_MARKER`) is deleted first; nothing else ever is
    (:func:`check_replaceable`). The marker goes only into a folder this made (missing or
    empty before), so a folder of the user's own never becomes deletable."""
    if overwrite and check_replaceable("--out", out, TRAIN_MARKER, TRAIN_WHAT):
        _log.info("--overwrite: deleting %s", out)
        shutil.rmtree(out)
    made = not out.exists() or not any(out.iterdir())
    out.mkdir(parents=True, exist_ok=True)
    if made:
        write_atomic(out / TRAIN_MARKER, "lipsweep train\n")
    write_atomic(out / "config.json", config_json)
