"""A space's ``callbacks:``, built when the sweep starts: each class named by the space
(:mod:`lipsweep.search.callback_refs` checked the names at load) is imported, must be a
``ray.tune.Callback``, and is built with its keyword arguments. Ray is imported in
:func:`create_callbacks` only.

**A callback cannot stop the sweep.** Its own code runs under two rules:

- *At start*, its import and its constructor get
  :func:`~lipsweep.sweep.callback_guard.callback_timeout_s` seconds each
  (``LIPSWEEP_CALLBACK_TIMEOUT_S``, default 600). One that raises, calls ``sys.exit()`` at
  import, or does not finish in time is a ConfigError naming ``callbacks[i]``: exit 2 with one
  line, before Ray starts or anything is written. So is a callback that cannot be pickled (it
  holds a lock, a socket or a client): Tune pickles the callbacks with the experiment once
  its loop starts, which would kill the sweep there.
- *While the sweep runs*, each is wrapped in
  :class:`~lipsweep.sweep.callback_guard.GuardedCallback`: Tune calls the wrapper,
  which runs the callback's hook on a thread of its own and waits at most that long. A hook
  that raises (``sys.exit()`` included) is logged, one line the first time per hook, and the
  sweep goes on: trials, MLflow runs, the other callbacks, the resume state are untouched (the
  count of errors is logged at the experiment's end). A hook that does not return in time is
  logged once and the callback is not called again in this sweep (its thread is left behind
  and dies with the driver). The sweep's outcome never depends on a user's callback: MLflow
  is the record, and a notifier or a second tracker failing (W&B offline) is no reason to lose
  GPU hours. Raise the bound for a callback whose hook legitimately takes longer (W&B's
  ``upload_timeout`` at the experiment's end).
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from lipsweep.core.config_base import ConfigError, show
from lipsweep.search.callback_refs import CallbackRef


def create_callbacks(
    refs: tuple[CallbackRef, ...], source: str = "", timeout_s: Optional[float] = None
) -> list[Any]:
    """Import and build each callback (imports Ray): ``ray.tune.Callback`` instances, in
    order, each in a :class:`~lipsweep.sweep.callback_guard.GuardedCallback`. A ConfigError
    naming ``callbacks[i]`` if one cannot be imported or built (it raises, calls
    ``sys.exit()`` or takes longer than ``timeout_s``, default
    :func:`~lipsweep.sweep.callback_guard.callback_timeout_s`), is not a Tune callback, or
    cannot be pickled."""
    if not refs:
        return []
    from ray import cloudpickle
    from ray.tune import Callback

    from lipsweep.sweep.callback_guard import GuardedCallback, bounded, callback_timeout_s, failed

    timeout_s = callback_timeout_s() if timeout_s is None else timeout_s

    built = []
    for i, ref in enumerate(refs):
        where = f"callbacks[{i}]"
        loaded = bounded(
            lambda ref=ref: getattr(importlib.import_module(ref.module), ref.attr),
            timeout_s,
            f"lipsweep-import-{where}",
        )
        if why := failed(f"importing {ref.path}", loaded, timeout_s):
            raise ConfigError(where, why, source) from loaded.error
        obj = loaded.value
        if not (isinstance(obj, type) and issubclass(obj, Callback)):
            raise ConfigError(
                where, f"{ref.path} is not a ray.tune.Callback subclass, got {show(obj)}", source
            )
        made = bounded(lambda obj=obj, ref=ref: obj(**ref.kwargs), timeout_s, where)
        if why := failed(f"{ref.path}(**{show(dict(ref.kwargs))})", made, timeout_s):
            raise ConfigError(where, why, source) from made.error
        pickled = bounded(lambda v=made.value: cloudpickle.dumps(v), timeout_s, where)
        if why := failed(f"pickling {ref.path}", pickled, timeout_s):
            raise ConfigError(
                where,
                f"{why} (Tune saves callbacks with the experiment; keep a lock, socket or "
                "client out of what it pickles, e.g. open it in setup())",
                source,
            ) from pickled.error
        built.append(GuardedCallback(made.value, f"{where} {ref.path}", timeout_s))
    return built
