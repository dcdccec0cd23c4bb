"""The attack family on the one registry mechanism (:mod:`lipsweep.core.registry`), torch-free.

A member's light facts are its :class:`AttackVocab`: its own settings dataclass, the setting
that lists its eps numerators, and its metric stem, so configs and metric names are known
without importing torch. The built-ins are declared by the import path of their class in
:mod:`lipsweep.attacks.builtin`, beside their settings; the class's file adds it with
``@register_attack(name)``. An attack that is not declared (a plugin, a test) passes
``eps_field``, ``metric_prefix`` and ``settings`` to the decorator
(:class:`~lipsweep.core.registry.Family`). The suite,
:class:`~lipsweep.attacks.config.RobustnessConfig`, holds every member's settings;
``cls.from_config(model, eps, suite)`` builds it (``suite.settings[name]`` is its own).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from lipsweep.core.registry import Family


@dataclass(frozen=True)
class AttackVocab:
    """What configs and metric names need of an attack, known without importing torch."""

    eps_field: str
    """The setting (a flat key of the suite) that lists its eps numerators."""
    metric_prefix: str
    """Metric name stem: ``acc_<metric_prefix>_<eps*255>`` (docs/contract.md)."""
    settings: Optional[type] = None
    """Its own frozen settings dataclass (flat keys, checked in ``__post_init__``), if any."""

    def __post_init__(self) -> None:
        for name in ("eps_field", "metric_prefix"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.isidentifier():
                raise ValueError(f"attack {name} must be an identifier, got {value!r}")


def setting_names(settings: Optional[type]) -> tuple[str, ...]:
    """The flat keys of an attack's settings dataclass (none without one)."""
    return tuple(f.name for f in dataclasses.fields(settings)) if settings else ()


def _check_spec(name: str, vocab: AttackVocab) -> None:
    """A setting belongs to one attack only (it is one flat config key)."""
    taken = {
        key: other.name
        for other in ATTACKS.entries()
        if other.name != name and other.info.get("spec") is not None
        for key in setting_names(other.info["spec"].settings)
    }
    for key in setting_names(vocab.settings):
        if key in taken:
            raise ValueError(f"setting {key!r} of attack {name!r} is a setting of {taken[key]!r}")


def _on_register(name: str, cls: Any, vocab: AttackVocab) -> None:
    cls.name = name
    cls.eps_field, cls.metric_prefix = vocab.eps_field, vocab.metric_prefix


ATTACKS: Family[type] = Family(
    "attack",
    spec_type=AttackVocab,
    unknown=lambda name, known: ValueError(f"unknown attack {name!r}; known attacks are {known}"),
    check=_check_spec,
    on_register=_on_register,
)

# The family's names (methods of the one family object): ``@register_attack("name")`` adds a
# class (an undeclared one gives ``eps_field=`` and ``metric_prefix=``, or has them as class
# attributes); ``attack_vocab(name)`` reads its vocabulary without importing it.
register_attack = ATTACKS.register
unregister_attack = ATTACKS.unregister
list_attacks = ATTACKS.names
is_attack = ATTACKS.is_member
attack_vocab = ATTACKS.spec
get_attack_class = ATTACKS.load
create_attack = ATTACKS.create
