"""The regularizer family on the one registry mechanism (:mod:`lipsweep.core.registry`).

Torch-free. Each member carries its :class:`~lipsweep.regularizers.spec.RegularizerSpec` (its
frozen settings dataclass, labels and plot style) as light facts; the class is imported on
first use. Built-ins are declared by import path in :mod:`.builtin`; the class's file adds it
with the :func:`register_regularizer` decorator, and so does a plugin or a test with a spec of
its own. The config, the CLI help, labels, tables, plots and the export card read the family.

Example::

    >>> list_regularizers()
    ['jasmin', 'none', 'specformer']
    >>> reg = create_regularizer("jasmin", k=10, lam=1e-3, aggregation="max")
    >>> reg.weights
    {'jasmin': 0.001}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from lipsweep.core.config_base import ConfigError
from lipsweep.core.registry import Registry
from lipsweep.regularizers.spec import RegularizerSpec

if TYPE_CHECKING:  # pragma: no cover
    from lipsweep.regularizers.base import Regularizer

T = TypeVar("T", bound=type)

REGULARIZERS: Registry[type] = Registry(
    "regularizer",
    lambda name, known: ConfigError(
        "regularizer", f"unknown regularizer {name!r}; choose one of {known}"
    ),
)


def _check_spec(spec: RegularizerSpec) -> None:
    """A setting name belongs to one regularizer only (it is one flat config key)."""
    taken = {n: s.name for s in regularizer_specs() if s.name != spec.name for n in s.setting_names}
    for n in spec.setting_names:
        if n in taken or n == "regularizer":
            raise ValueError(
                f"setting {n!r} of {spec.name!r} is already a setting of "
                f"{taken.get(n, 'the config')!r}"
            )


def declare_regularizer(spec: RegularizerSpec, impl: str) -> None:
    """Declare a member by the import path of its class (``"module:Class"``), loaded on first
    use: the family index (:mod:`.builtin`) does this for the built-ins."""
    _check_spec(spec)
    REGULARIZERS.declare(spec.name, impl, settings=spec.settings, info={"spec": spec})


def register_regularizer(
    name: Optional[str] = None, *, spec: Optional[RegularizerSpec] = None
) -> Callable[[T], T]:
    """Class decorator: add a :class:`~lipsweep.regularizers.base.Regularizer` to the family.

    A declared member (a built-in) keeps its declared spec; any other passes ``spec``.
    """

    def deco(cls: T) -> T:
        key = name or (spec.name if spec is not None else cls.name)  # type: ignore[attr-defined]
        if spec is not None:
            if spec.name != key:
                raise ValueError(f"spec {spec.name!r} registered under {key!r}")
            _check_spec(spec)
        elif key not in REGULARIZERS:
            raise TypeError(f"regularizer {key!r} is not declared; pass its spec=")
        info = {"spec": spec} if spec is not None else None
        REGULARIZERS.add(key, cls, settings=spec.settings if spec else None, info=info)
        cls.name = key  # type: ignore[attr-defined]
        return cls

    return deco


def unregister_regularizer(name: str) -> None:
    """Remove ``name`` (tests register temporary regularizers)."""
    REGULARIZERS.remove(name)


def regularizer_specs() -> list[RegularizerSpec]:
    """Every member's spec, in registration order (nothing imported)."""
    return [m.info["spec"] for m in REGULARIZERS.entries()]


def regularizer_spec(name: str) -> RegularizerSpec:
    """The spec of ``name``; ConfigError('regularizer') if unknown."""
    return REGULARIZERS.entry(name).info["spec"]


def find_spec(name: object) -> Optional[RegularizerSpec]:
    """The spec of ``name``, or None (for presenters reading logged params)."""
    return regularizer_spec(name) if is_regularizer(name) else None  # type: ignore[arg-type]


def setting_names() -> tuple[str, ...]:
    """Every regularizer setting (flat config keys other than ``regularizer``), in order."""
    return tuple(n for spec in regularizer_specs() for n in spec.setting_names)


def shown_params() -> tuple[str, ...]:
    """Every shown setting of every regularizer, in registration order."""
    return tuple(n for spec in regularizer_specs() for n in spec.shown)


def list_regularizers(filter: str = "") -> list[str]:
    """Sorted names of the registered regularizers, optionally matching a glob ``filter``."""
    return REGULARIZERS.names(filter)


def is_regularizer(name: object) -> bool:
    """True if ``name`` is a registered regularizer."""
    return name in REGULARIZERS


def get_regularizer_class(name: str) -> type["Regularizer"]:
    """The class of ``name`` (imported on first use); ConfigError('regularizer') if unknown."""
    return REGULARIZERS.load(name)
