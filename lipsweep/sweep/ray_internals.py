"""The Ray internals lipsweep uses: the one module that imports Ray's private modules.

Ray has no public API for these; each is read from the Ray that uv.lock pins (2.60.0), and
its tests drive the installed Ray. Each import happens inside its function, so importing
this module imports no Ray. What each is for:

- :func:`enable_token_auth`: ``ray._private.authentication``'s token mode and
  ``ray._raylet``'s token cache, read again after the driver sets a per-driver token for a
  local Ray (:func:`lipsweep.sweep.driver._local_token_auth`).
- :func:`new_auth_token`, :func:`reset_auth_token_cache`: a token as Ray makes them, written
  to a mode-600 ``~/.ray/auth_token`` (:mod:`lipsweep.sweep.ray_token`), then read by Ray.
- :func:`daemon_services`: ``ray._private.services``, whose ``ConsolePopen`` starts Ray's
  daemons, so that :mod:`lipsweep.sweep.local_ray` starts each in its own process group.
- :func:`training_result`, :func:`checkpoint_manager`: ``ray.train._internal``'s
  ``_TrainingResult`` and ``_CheckpointManager``, a trial's checkpoint list rebuilt on
  resume (:mod:`lipsweep.sweep.checkpoint_refs`).
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ray.train import Checkpoint, CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager as CheckpointManager
    from ray.train._internal.session import _TrainingResult as TrainingResult


def enable_token_auth() -> None:
    """Make this process use the token mode and the token its environment names now: Ray
    caches both at import."""
    from ray._private.authentication.authentication_token_setup import _enable_token_auth

    _enable_token_auth()
    reset_auth_token_cache()


def new_auth_token() -> str:
    """A new Ray auth token, made as Ray makes its own."""
    from ray._private.authentication.authentication_token_generator import (
        generate_new_authentication_token,
    )

    return generate_new_authentication_token()


def reset_auth_token_cache() -> None:
    """Make Ray read its auth token (environment or file) again on next use."""
    from ray._raylet import AuthenticationTokenLoader

    AuthenticationTokenLoader.instance().reset_cache()


def daemon_services() -> Optional[ModuleType]:
    """``ray._private.services`` where its ``ConsolePopen`` (the class Ray starts its daemons
    with) exists and the kernel supports fate sharing (without it Ray's reaper needs the
    daemons in the driver's process group); else None."""
    try:
        from ray._private import services
        from ray._private.utils import detect_fate_sharing_support
    except ImportError:  # pragma: no cover - depends on Ray internals
        return None
    if getattr(services, "ConsolePopen", None) is None or not detect_fate_sharing_support():
        return None
    return services


def training_result(checkpoint: Checkpoint, metrics: dict[str, Any]) -> TrainingResult:
    """Tune's record of one reported checkpoint with its metrics."""
    from ray.train._internal.session import _TrainingResult

    return _TrainingResult(checkpoint=checkpoint, metrics=metrics)


def checkpoint_manager(config: CheckpointConfig) -> CheckpointManager:
    """An empty checkpoint list of a trial, applying ``config`` (its ``num_to_keep``)."""
    from ray.train._internal.checkpoint_manager import _CheckpointManager

    return _CheckpointManager(config)
