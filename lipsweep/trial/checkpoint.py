"""Epoch checkpoints: safetensors + JSON only (nothing is unpickled), written atomically.

A checkpoint is a folder ``epoch_NNNN`` holding ``model.safetensors``, ``optimizer.safetensors``
(tensor state, flattened), ``regularizer.safetensors`` (e.g. a regularizer's power-iteration
vectors) and ``state.json``: epoch, step, non-tensor optimizer state, a SHA-256 and the size in
bytes of every file (``sha256``, ``sizes``: a copy on storage cut short shows in its listing),
and the trial's flat config with its SHA-256, ``config_sha256`` (a checkpoint resumes only
under the configuration it was trained with, see :func:`config_mismatch`). It is
written to a hidden temporary folder, fsync'ed, then renamed into place, so a crash or a full
disk never leaves a half-written checkpoint under a real name; the previous checkpoint is
only pruned after the new one is in place. Loading verifies the checksums and
falls back to the newest intact checkpoint, saying which.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file

from lipsweep.core.digest import file_sha256
from lipsweep.core.paths import WriteError, removing
from lipsweep.trial.checkpoint_files import (
    MODEL_FILE,
    OPTIMIZER_FILE,
    REGULARIZER_FILE,
    STATE_FILE,
    WEIGHT_FILES,
)

_log = logging.getLogger(__name__)
_NAME = re.compile(r"^epoch_(\d{4,})$")
CONFIG_KEY = "config"  # the flat trial config a checkpoint was trained under
CONFIG_HASH_KEY = "config_sha256"


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or read."""


class CheckpointWriteError(CheckpointError, WriteError):
    """A checkpoint could not be written (disk full, ``ulimit -f``); its temporary folder is
    gone and the previous checkpoint untouched. An OSError too: the CLI prints one line."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: tensors on CPU plus its JSON state."""

    path: Path
    epoch: int
    model: dict[str, torch.Tensor]
    optimizer: dict[str, torch.Tensor]
    regularizer: dict[str, torch.Tensor]
    state: dict[str, Any] = field(default_factory=dict)


def config_digest(flat: dict[str, Any]) -> str:
    """SHA-256 of a flat trial config as canonical JSON (sorted keys, tuples as lists)."""
    return hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()


def config_mismatch(state: dict[str, Any], flat: dict[str, Any]) -> Optional[str]:
    """``None`` if the checkpoint whose ``state.json`` is ``state`` was trained under
    ``flat``; else what differs (the settings, when the state lists its config)."""
    saved = state.get(CONFIG_KEY)
    digest = state.get(CONFIG_HASH_KEY) or (
        config_digest(saved) if isinstance(saved, dict) else None
    )
    if digest is None:
        return "it does not record the configuration it was trained with"
    if digest == config_digest(flat):
        return None
    if not isinstance(saved, dict):
        return f"configuration sha256 {digest[:12]} differs from {config_digest(flat)[:12]}"
    now = json.loads(json.dumps(flat, default=str))
    keys = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    shown = ", ".join(f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in keys[:6])
    return shown + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")


def foreign_checkpoint(root: Path, flat: dict[str, Any]) -> Optional[str]:
    """The first checkpoint under ``root`` trained under another configuration than ``flat``,
    as ``'<path>: <what differs>'`` (reads only each ``state.json``; unreadable ones are left
    to :func:`load_latest`, which skips them)."""
    for path in reversed(list_checkpoints(root)):
        try:
            state = json.loads(_read_regular(path, STATE_FILE))
        except (OSError, ValueError, CheckpointError):
            continue
        if isinstance(state, dict) and (why := config_mismatch(state, flat)):
            return f"{path}: {why}"
    return None


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def flatten_optimizer(opt_state: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``optimizer.state_dict()`` into safetensors-able tensors and JSON metadata."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, pstate in opt_state["state"].items():
        for key, val in pstate.items():
            if torch.is_tensor(val):
                tensors[f"{pid}.{key}"] = val.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = val
    return tensors, {"param_groups": opt_state["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict[str, Any]:
    """Inverse of :func:`flatten_optimizer`."""
    state: dict[int, dict[str, Any]] = {}
    for name, val in tensors.items():
        pid, key = name.split(".", 1)
        state.setdefault(int(pid), {})[key] = val
    for pid, vals in meta.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(vals)
    return {"state": state, "param_groups": meta["param_groups"]}


def list_checkpoints(root: Path) -> list[Path]:
    """Checkpoint folders under ``root``, oldest first (temporary folders ignored)."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and _NAME.match(p.name)]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))


def _write_folder(
    tmp: Path,
    model: dict[str, torch.Tensor],
    optimizer: dict[str, Any],
    regularizer: dict[str, torch.Tensor],
    state: dict[str, Any],
    epoch: int,
) -> None:
    """The files of one checkpoint, written and fsync'ed into the (new) folder ``tmp``."""
    tmp.mkdir()
    opt_tensors, opt_meta = flatten_optimizer(optimizer)
    files = {
        MODEL_FILE: {k: v.detach().cpu().contiguous() for k, v in model.items()},
        OPTIMIZER_FILE: opt_tensors,
        REGULARIZER_FILE: {k: v.detach().cpu().contiguous() for k, v in regularizer.items()},
    }
    digests, sizes = {}, {}
    for name, tensors in files.items():
        save_file(tensors, str(tmp / name))
        digests[name] = file_sha256(tmp / name)
        sizes[name] = (tmp / name).stat().st_size
    meta = dict(state, epoch=epoch, optimizer_meta=opt_meta, sha256=digests, sizes=sizes)
    if isinstance(state.get(CONFIG_KEY), dict):
        meta[CONFIG_HASH_KEY] = config_digest(state[CONFIG_KEY])
    with open(tmp / STATE_FILE, "w") as fh:
        json.dump(meta, fh)
        fh.flush()
        os.fsync(fh.fileno())
    for name in files:
        with open(tmp / name, "rb") as fh:
            os.fsync(fh.fileno())
    _fsync_dir(tmp)


def save_checkpoint(
    root: Path,
    epoch: int,
    model: dict[str, torch.Tensor],
    optimizer: dict[str, Any],
    regularizer: dict[str, torch.Tensor],
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write checkpoint ``epoch`` atomically under ``root`` and prune to the newest ``keep``."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"epoch_{epoch:04d}"
    tmp = root / f".tmp-epoch_{epoch:04d}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with removing(tmp, str(final), errors=()):  # any exception: the temporary is removed
            _write_folder(tmp, model, optimizer, regularizer, state, epoch)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            _fsync_dir(root)
    except (OSError, SafetensorError) as exc:  # safetensors reports a full disk as its own
        raise CheckpointWriteError(
            f"could not write checkpoint {final}: {exc}; the previous checkpoint is untouched"
        ) from exc
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


_SHA = re.compile(r"^[0-9a-f]{64}$")


def _read_regular(folder: Path, name: str) -> bytes:
    """Bytes of ``folder/name``: a plain name, a regular file, no symlink (a FIFO or
    ``/dev/zero`` would block or never end), opened without following links."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\\" in name
        or "\x00" in name
    ):
        raise CheckpointError(
            f"{folder / STATE_FILE}: sha256 names {str(name)[:80]!r}, not a "
            "plain file name inside the checkpoint folder"
        )
    try:
        fd = os.open(folder / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise CheckpointError(
            f"{folder / name}: cannot open ({exc.strerror}; symlinks are refused)"
        ) from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckpointError(f"{folder / name} is not a regular file")
        return fh.read()


def _check_state(path: Path, meta: Any) -> dict[str, str]:
    """The ``sha256`` record of a parsed ``state.json``; CheckpointError if it is malformed."""
    where = path / STATE_FILE
    if not isinstance(meta, dict):
        raise CheckpointError(
            f"{where} is malformed: top level is {type(meta).__name__}, not an object"
        )
    digests = meta.get("sha256")
    if not isinstance(digests, dict) or not all(
        isinstance(d, str) and _SHA.match(d) for d in digests.values()
    ):
        raise CheckpointError(
            f"{where} is malformed: sha256 must map file names to hex SHA-256 digests"
        )
    on_disk = {p.name for p in path.iterdir() if p.name.endswith(".safetensors")}
    missing = sorted((set(WEIGHT_FILES) | on_disk) - set(digests))
    if missing:
        raise CheckpointError(
            f"{where} lists no checksum for {missing}: every weights file must be verified"
        )
    epoch = meta.get("epoch")
    match = _NAME.match(path.name)
    if (
        isinstance(epoch, bool)
        or not isinstance(epoch, int)
        or (match is not None and epoch != int(match.group(1)))
    ):
        raise CheckpointError(
            f"{where} is malformed: epoch {str(epoch)[:40]} does not match the folder {path.name}"
        )
    opt = meta.get("optimizer_meta")
    if (
        not isinstance(opt, dict)
        or not isinstance(opt.get("param_groups"), list)
        or not isinstance(opt.get("scalars", {}), dict)
        or not isinstance(meta.get("history", []), list)
    ):
        raise CheckpointError(f"{where} is malformed: optimizer_meta or history has the wrong type")
    return digests


def load_checkpoint(path: Path) -> Checkpoint:
    """Load and verify one checkpoint folder; raises CheckpointError if it is damaged.

    Every weights file must be listed in ``state.json``'s ``sha256`` and match it; the names
    there are plain file names of regular files inside ``path`` (no ``..``, absolute paths,
    symlinks, FIFOs or devices). Each file is read once, and the verified bytes are what is
    deserialised."""
    from safetensors.torch import load as load_bytes

    try:
        meta = json.loads(_read_regular(path, STATE_FILE))
        digests = _check_state(path, meta)
        blobs = {}
        for name, digest in digests.items():
            blob = _read_regular(path, name)
            if hashlib.sha256(blob).hexdigest() != digest:
                raise CheckpointError(
                    f"{path / name} does not match its checksum (truncated or modified)"
                )
            blobs[name] = blob
        tensors = {name: load_bytes(blobs.pop(name)) for name in WEIGHT_FILES}
        unflatten_optimizer(tensors[OPTIMIZER_FILE], meta["optimizer_meta"])
        return Checkpoint(
            path=path,
            epoch=meta["epoch"],
            model=tensors[MODEL_FILE],
            optimizer=tensors[OPTIMIZER_FILE],
            regularizer=tensors[REGULARIZER_FILE],
            state=meta,
        )
    except CheckpointError:
        raise
    except (
        OSError,
        ValueError,
        KeyError,
        RuntimeError,
        TypeError,
        AttributeError,
        RecursionError,
        SafetensorError,
    ) as exc:
        raise CheckpointError(
            f"{path} is unreadable: {type(exc).__name__}: {str(exc)[:200]}"
        ) from exc


def load_latest(root: Path) -> Optional[Checkpoint]:
    """The newest intact checkpoint under ``root``, falling back past damaged ones (logged)."""
    for path in reversed(list_checkpoints(root)):
        try:
            ckpt = load_checkpoint(path)
        except CheckpointError as err:
            _log.warning(
                "checkpoint %s is damaged (%s); falling back to the previous one", path.name, err
            )
            continue
        return ckpt
    return None
