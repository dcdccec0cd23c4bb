"""Which device a trial trains on, decided once, with the reason said.

:func:`decide_device` is pure: the caller passes what it knows (the GPUs Ray assigned to the
trial, if it runs under Ray, and whether torch sees CUDA), so the rule is unit-tested without
Ray or a GPU. The rule:

- ``cpu``: the CPU, always (a warning in the reason if Ray assigned a GPU that stays idle).
- ``cuda`` / ``cuda:N``: that device if CUDA is visible (and N below the visible device count:
  under Ray a trial sees only its own GPUs, as cuda:0, cuda:1, ...), else a :class:`DeviceError`
  that says whether Ray assigned GPUs the process cannot see (driver, ``--gpus all``, CUDA
  build).
- ``auto``: CUDA when Ray assigned a GPU (an error if CUDA is then not visible: a GPU node must
  never train on its CPU by accident); the CPU when Ray assigned none (an unassigned GPU belongs
  to another trial); outside Ray (``assigned_gpus is None``) CUDA if visible, else the CPU.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Optional, Sequence

from lipsweep.core.config_base import ConfigError
from lipsweep.settings.config import cuda_index

_log = logging.getLogger(__name__)


class DeviceError(ConfigError):
    """The requested or assigned device cannot be used here; deterministic, never retried."""

    def __init__(self, message: str) -> None:
        super().__init__("device", message)


def decide_device(
    requested: str,
    assigned_gpus: Optional[Sequence[object]],
    cuda_available: bool,
    device_count: Optional[int] = None,
) -> tuple[str, str]:
    """``(device, reason)`` for a trial; raises :class:`DeviceError` when it cannot train.

    Args:
        requested: the trial's ``device`` setting: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        assigned_gpus: GPU ids Ray assigned to this trial (``[]``: none), or ``None`` when the
            trial does not run under Ray (``lipsweep train``).
        cuda_available: ``torch.cuda.is_available()`` in this process.
        device_count: ``torch.cuda.device_count()`` (None: not checked). ``cuda:N`` needs
            N < device_count; under Ray a trial sees only its own GPUs, as cuda:0, cuda:1, ...
    """
    gpus = list(assigned_gpus) if assigned_gpus is not None else None
    ray_note = f"Ray assigned GPU(s) {gpus}" if gpus else ""
    if requested == "cpu":
        if gpus:
            return "cpu", f"device: cpu requested; {ray_note}, which stays idle"
        return "cpu", "device: cpu requested"
    try:
        index = cuda_index(requested)
    except ConfigError as err:
        raise DeviceError(err.message) from None
    if requested.startswith("cuda"):
        if (
            cuda_available
            and device_count is not None
            and index is not None
            and index >= device_count
        ):
            seen = f"{device_count} CUDA device(s)" + (
                f" (Ray shows a trial only its own GPUs, as cuda:0..; {ray_note})" if gpus else ""
            )
            raise DeviceError(
                f"{requested!r} requested but this process sees {seen}; use device: cuda"
            )
        if cuda_available:
            return requested, f"device: {requested} requested and CUDA is visible" + (
                f" ({ray_note})" if gpus else ""
            )
        if gpus:
            raise DeviceError(
                f"{ray_note} but CUDA is not visible in the trial's process ({_cuda_hint()})"
            )
        raise DeviceError(
            f"{requested!r} requested but CUDA is not available on this "
            f"machine ({_cuda_hint()}); use device: cpu or auto"
        )
    if gpus:
        if not cuda_available:
            raise DeviceError(
                f"device: auto and {ray_note}, but CUDA is not visible in the "
                f"trial's process ({_cuda_hint()}); refusing to train a GPU "
                "trial on the CPU"
            )
        return "cuda", f"device: auto, {ray_note}"
    if gpus is not None:
        return "cpu", "device: auto and Ray assigned this trial no GPU (resources.gpu: 0)"
    if cuda_available:
        return "cuda", "device: auto and CUDA is visible"
    return "cpu", "device: auto and CUDA is not available"


def _cuda_hint() -> str:
    """What to check when CUDA is missing: the torch build and the visible-devices variable."""
    try:
        import torch

        build = f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}"
    except ImportError:  # pragma: no cover - torch is a dependency
        build = "torch missing"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = "unset" if visible is None else repr(visible)
    return (
        f"{build}, CUDA_VISIBLE_DEVICES {seen}; check the NVIDIA driver (>= 580 for CUDA "
        "13) and that the container got the GPUs (docker --gpus all)"
    )


def choose_device(
    requested: str,
    assigned_gpus: Optional[Sequence[object]] = None,
    level: int = logging.INFO,
    work: str = "training",
) -> str:
    """:func:`decide_device` with this process's CUDA; logs "<work> on <device>: <reason>"
    once at ``level``."""
    import torch

    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else None
    device, reason = decide_device(requested, assigned_gpus, available, count)
    _log.log(level, "%s on %s: %s", work, device, reason)
    return device


def check_sweep_device(gpu_per_trial: float, trials: Sequence[dict]) -> None:
    """Driver-side check: ``device: cuda`` with ``resources.gpu: 0`` needs CUDA right here.

    With ``gpu > 0`` the driver (a CPU head) need not have a GPU: each trial decides on its
    worker (:func:`decide_device`); only a ``cuda:N`` that no trial can see (Ray shows a
    trial ``ceil(gpu)`` GPUs, as cuda:0, cuda:1, ...) is refused here, before any trial starts.
    """
    wanted = sorted(
        {str(t.get("device")) for t in trials if str(t.get("device", "auto")).startswith("cuda")}
    )
    if gpu_per_trial > 0:
        visible = math.ceil(gpu_per_trial)
        for name in wanted:
            index = cuda_index(name)
            if index is not None and index >= visible:
                raise DeviceError(
                    f"{name!r} with resources.gpu: {gpu_per_trial:g}: Ray shows each trial "
                    f"only its own {visible} GPU(s), as cuda:0..cuda:{visible - 1}; use "
                    "device: cuda"
                )
        return
    if wanted:
        import torch

        if not torch.cuda.is_available():
            raise DeviceError(
                f"{wanted[0]!r} with resources.gpu: 0 runs the trials here, "
                "where CUDA is not available; set resources.gpu: 1 (the workers "
                "then need GPUs) or device: auto"
            )
