"""The attack family on the one registry mechanism (:mod:`lipsweep.core.registry`), torch-free.

This is the family's index: each built-in is declared here by the import path of its class
with its light facts (:class:`AttackVocab`: the :class:`~lipsweep.attacks.config.
RobustnessConfig` field that lists its eps numerators, and its metric stem), so configs and
metric names are known without importing torch; the class's file adds it with
``@register_attack(name)``. An attack that is not declared here (a plugin, a test) passes
``eps_field`` and ``metric_prefix`` to the decorator. Its settings are the family's
:class:`~lipsweep.attacks.config.RobustnessConfig`; ``cls.from_config(model, eps, suite)``
builds it.

Adding a built-in attack: its class in a new file of this folder with
``@register_attack("name")``, and one ``_declare(...)`` line below (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, TypeVar

from lipsweep.core.registry import Registry

T = TypeVar("T", bound=type)

ATTACKS: Registry[type] = Registry(
    "attack",
    lambda name, known: ValueError(f"unknown attack {name!r}; known attacks are {known}"),
)


@dataclass(frozen=True)
class AttackVocab:
    """What configs and metric names need of an attack, known without importing torch."""

    eps_field: str
    """The :class:`RobustnessConfig` field that lists its eps numerators."""
    metric_prefix: str
    """Metric name stem: ``acc_<metric_prefix>_<eps*255>`` (docs/contract.md)."""

    def __post_init__(self) -> None:
        for name in ("eps_field", "metric_prefix"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.isidentifier():
                raise ValueError(f"attack {name} must be an identifier, got {value!r}")


def _declare(name: str, impl: str, eps_field: str, metric_prefix: str) -> None:
    ATTACKS.declare(name, impl, info={"vocab": AttackVocab(eps_field, metric_prefix)})


# The built-in attacks: name, class, RobustnessConfig eps field, metric stem.
_declare("fgsm", "lipsweep.attacks._fgsm:FGSM", "fgsm_eps", "fgsm")
_declare("pgd", "lipsweep.attacks._pgd:PGD", "pgd_eps", "pgd")
_declare("autoattack", "lipsweep.attacks.autoattack:AutoAttack", "aa_eps", "aa")


def register_attack(
    name: str, *, eps_field: Optional[str] = None, metric_prefix: Optional[str] = None
) -> Callable[[T], T]:
    """Class decorator: add an :class:`~lipsweep.attacks.base.Attack` to the family under
    ``name``. A declared attack keeps its declared vocabulary; any other gives ``eps_field``
    and ``metric_prefix`` (or sets them on the class)."""

    def deco(cls: Any) -> Any:
        if name in ATTACKS and not ATTACKS.entry(name).loaded:
            vocab = ATTACKS.entry(name).info["vocab"]
        else:
            vocab = AttackVocab(
                eps_field or getattr(cls, "eps_field", ""),
                metric_prefix or getattr(cls, "metric_prefix", ""),
            )
        ATTACKS.add(name, cls, info={"vocab": vocab})
        cls.name = name
        cls.eps_field, cls.metric_prefix = vocab.eps_field, vocab.metric_prefix
        return cls

    return deco


def unregister_attack(name: str) -> None:
    """Remove ``name`` (tests register temporary attacks)."""
    ATTACKS.remove(name)


def list_attacks(filter: str = "") -> list[str]:
    """Attack names, sorted; ``filter``: an optional fnmatch pattern."""
    return ATTACKS.names(filter)


def is_attack(name: str) -> bool:
    return name in ATTACKS


def attack_vocab(name: str) -> AttackVocab:
    """The config field and metric stem of attack ``name`` (nothing imported)."""
    return ATTACKS.entry(name).info["vocab"]


def get_attack_class(name: str) -> type:
    """The class registered under ``name`` (a built-in's module is imported on first use);
    ValueError naming the known ones otherwise."""
    return ATTACKS.load(name)


def create_attack(name: str, **kwargs: Any) -> Any:
    """Build attack ``name`` with constructor arguments ``kwargs`` (``model``, ``eps``, ...)."""
    return ATTACKS.create(name, **kwargs)
