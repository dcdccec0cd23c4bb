"""Registry of attention regularizers: ``create_regularizer`` / ``list_regularizers``.

The registry holds each regularizer's torch-free :class:`~lipsweep.regularizers.spec.
RegularizerSpec`; the class is imported when first built. A regularizer joins the family with
:func:`register_regularizer` (a spec, or a class carrying one as ``spec``); the config, the
CLI help, labels, tables, plots and the export card read the registry.

Example::

    >>> list_regularizers()
    ['jasmin', 'none', 'specformer']
    >>> reg = create_regularizer("jasmin", k=10, lam=1e-3, aggregation="max")
    >>> reg.weights
    {'jasmin': 0.001}
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

from lipsweep.core.config_base import ConfigError
from lipsweep.core.registry import Registry
from lipsweep.regularizers.spec import RegularizerSpec, Setting

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.regularizers.base import Regularizer

_REGISTRY: Registry[RegularizerSpec] = Registry(
    "regularizer",
    lambda name, known: ConfigError(
        "regularizer", f"unknown regularizer {name!r}; choose one of {known}"
    ),
)
_CLASSES: dict[str, type] = {}
_LISTENERS: list[Callable[[], None]] = []


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` after every (un)registration (the config's fields follow)."""
    _LISTENERS.append(listener)


def _changed() -> None:
    for listener in _LISTENERS:
        listener()


def register_regularizer(item: Union[RegularizerSpec, type]) -> Any:
    """Add a :class:`RegularizerSpec`, or a class with a ``spec`` attribute (decorator).

    A setting name may belong to one regularizer only (it is one flat config key).
    """
    spec = item if isinstance(item, RegularizerSpec) else getattr(item, "spec", None)
    if not isinstance(spec, RegularizerSpec):
        raise TypeError(
            f"{getattr(item, '__name__', item)!s} needs a RegularizerSpec `spec` to be registered"
        )
    taken = {
        s.name: other.name
        for other in _REGISTRY.members()
        if other.name != spec.name
        for s in other.settings
    }
    for s in spec.settings:
        if s.name in taken or s.name == "regularizer":
            raise ValueError(
                f"setting {s.name!r} of {spec.name!r} is already a setting of "
                f"{taken.get(s.name, 'the config')!r}"
            )
    _REGISTRY.add(spec.name, spec)
    if isinstance(item, type):
        _CLASSES[spec.name] = item
    _changed()
    return item


def unregister_regularizer(name: str) -> None:
    """Remove ``name`` (tests register temporary regularizers)."""
    _REGISTRY.remove(name)
    _CLASSES.pop(name, None)
    _changed()


def regularizer_specs() -> list[RegularizerSpec]:
    """Every registered spec, in registration order."""
    return _REGISTRY.members()


def regularizer_spec(name: str) -> RegularizerSpec:
    """The spec of ``name``; ConfigError('regularizer') if unknown."""
    return _REGISTRY.get(name)


def find_spec(name: object) -> Optional[RegularizerSpec]:
    """The spec of ``name``, or None (for presenters reading logged params)."""
    return _REGISTRY.get(name) if is_regularizer(name) else None  # type: ignore[arg-type]


def all_settings() -> list[Setting]:
    """Every regularizer setting (flat config keys other than ``regularizer``), in order."""
    return [s for spec in regularizer_specs() for s in spec.settings]


def shown_params() -> tuple[str, ...]:
    """Every shown setting of every regularizer, in registration order."""
    return tuple(n for spec in regularizer_specs() for n in spec.shown)


def list_regularizers(filter: str = "") -> list[str]:
    """Sorted names of the registered regularizers, optionally matching a glob ``filter``."""
    return _REGISTRY.names(filter)


def is_regularizer(name: object) -> bool:
    """True if ``name`` is a registered regularizer."""
    return name in _REGISTRY


def get_regularizer_class(name: str) -> type["Regularizer"]:
    """The class of ``name`` (imported on first use); ConfigError('regularizer') if unknown."""
    spec = _REGISTRY.get(name)
    if name not in _CLASSES:
        impl = spec.impl
        if isinstance(impl, str):
            module, _, attr = impl.partition(":")
            impl = getattr(importlib.import_module(module), attr)
        _CLASSES[name] = impl
    return _CLASSES[name]
