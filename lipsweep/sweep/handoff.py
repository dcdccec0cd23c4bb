"""Hand a ``--resume`` run's own callbacks and scheduler to ``Tuner.restore``, by pickling.

``Tuner.restore`` brings back the callbacks and the scheduler that Tune pickled at the
sweep's first start, and Tune has no public way to replace them. The pickle protocol is
public, though: an object bound to a key (:meth:`Handoff.bind`) pickles as a reference to
that key. Unpickled in a process where an object is bound under the same key (the driver of
the ``--resume`` run binds its own before ``Tuner.restore``), the reference *is* that object;
anywhere else it is rebuilt from its pickled state, as any object would be.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

_BOUND: dict[str, Any] = {}


def _adopt(key: Optional[str], build: Callable[..., Any], args: tuple, state: Any) -> Any:
    """Unpickling: the object bound under ``key`` in this process, or a rebuilt one."""
    if key is not None and key in _BOUND:
        return _BOUND[key]
    obj = build(*args)
    if state is not None:
        if hasattr(obj, "__setstate__"):
            obj.__setstate__(state)
        else:
            obj.__dict__.update(state)
    return obj


class Handoff:
    """Mixin: pickles as a reference to its key once bound (see the module docstring)."""

    _handoff_key: Optional[str] = None

    def bind(self, key: str) -> None:
        """This object answers for ``key`` in this process until :func:`unbind_all`."""
        self._handoff_key = key
        _BOUND[key] = self

    def __reduce_ex__(self, protocol: Any) -> tuple:
        build, args, state, *_ = super().__reduce_ex__(protocol)
        return _adopt, (self._handoff_key, build, args, state)


def unbind_all(prefix: str) -> None:
    """Forget every object bound under a key starting with ``prefix`` (the sweep ended)."""
    for key in [k for k in _BOUND if k.startswith(prefix)]:
        del _BOUND[key]
