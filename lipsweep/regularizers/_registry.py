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

from typing import Optional

from lipsweep.core.config_base import ConfigError
from lipsweep.core.registry import Family
from lipsweep.regularizers.spec import RegularizerSpec


def _check_spec(name: str, spec: RegularizerSpec) -> None:
    """A spec is registered under its own name, and a setting name belongs to one regularizer
    only (it is one flat config key)."""
    if spec.name != name:
        raise ValueError(f"spec {spec.name!r} registered under {name!r}")
    taken = {
        n: s.name
        for s in REGULARIZERS.specs()
        if s is not None and s.name != spec.name
        for n in s.setting_names
    }
    for n in spec.setting_names:
        if n in taken or n == "regularizer":
            raise ValueError(
                f"setting {n!r} of {spec.name!r} is already a setting of "
                f"{taken.get(n, 'the config')!r}"
            )


def _on_register(name: str, cls: type, spec: RegularizerSpec) -> None:
    cls.name = name  # type: ignore[attr-defined]


REGULARIZERS: Family[type] = Family(
    "regularizer",
    spec_type=RegularizerSpec,
    unknown=lambda name, known: ConfigError(
        "regularizer", f"unknown regularizer {name!r}; choose one of {known}"
    ),
    check=_check_spec,
    on_register=_on_register,
)

# The family's names (methods of the one family object). ``@register_regularizer("name")``
# adds a class; a member not declared in :mod:`.builtin` passes ``spec=`` (its
# :class:`RegularizerSpec`).
register_regularizer = REGULARIZERS.register
unregister_regularizer = REGULARIZERS.unregister
regularizer_specs = REGULARIZERS.specs
regularizer_spec = REGULARIZERS.spec
list_regularizers = REGULARIZERS.names
is_regularizer = REGULARIZERS.is_member
get_regularizer_class = REGULARIZERS.load


def declare_regularizer(spec: RegularizerSpec, impl: str) -> None:
    """Declare a member by the import path of its class (``"module:Class"``), loaded on first
    use: the family index (:mod:`.builtin`) does this for the built-ins."""
    REGULARIZERS.declare(spec.name, impl, spec=spec)


def find_spec(name: object) -> Optional[RegularizerSpec]:
    """The spec of ``name``, or None (for presenters reading logged params)."""
    return regularizer_spec(name) if is_regularizer(name) else None  # type: ignore[arg-type]


def setting_names() -> tuple[str, ...]:
    """Every regularizer setting (flat config keys other than ``regularizer``), in order."""
    return tuple(n for spec in regularizer_specs() for n in spec.setting_names)


def shown_params() -> tuple[str, ...]:
    """Every shown setting of every regularizer, in registration order."""
    return tuple(n for spec in regularizer_specs() for n in spec.shown)
