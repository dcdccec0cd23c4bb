"""The attack family on the one registry mechanism (:mod:`lipsweep.core.registry`), torch-free.

This is the family's index: each built-in is declared here by the import path of its class
with its light facts (:class:`AttackVocab`: the :class:`~lipsweep.attacks.config.
RobustnessConfig` field that lists its eps numerators, and its metric stem), so configs and
metric names are known without importing torch; the class's file adds it with
``@register_attack(name)``. An attack that is not declared here (a plugin, a test) passes
``eps_field`` and ``metric_prefix`` to the decorator (:class:`~lipsweep.core.registry.Family`).
Its settings are the family's :class:`~lipsweep.attacks.config.RobustnessConfig`;
``cls.from_config(model, eps, suite)`` builds it.

Adding a built-in attack: its class in a new file of this folder with
``@register_attack("name")``, and one ``ATTACKS.declare(...)`` line below
(docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lipsweep.core.registry import Family


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


def _on_register(name: str, cls: Any, vocab: AttackVocab) -> None:
    cls.name = name
    cls.eps_field, cls.metric_prefix = vocab.eps_field, vocab.metric_prefix


ATTACKS: Family[type] = Family(
    "attack",
    spec_type=AttackVocab,
    unknown=lambda name, known: ValueError(f"unknown attack {name!r}; known attacks are {known}"),
    on_register=_on_register,
)

# The built-in attacks: name, class, and its vocabulary (RobustnessConfig eps field, metric stem).
ATTACKS.declare("fgsm", "lipsweep.attacks._fgsm:FGSM", spec=AttackVocab("fgsm_eps", "fgsm"))
ATTACKS.declare("pgd", "lipsweep.attacks._pgd:PGD", spec=AttackVocab("pgd_eps", "pgd"))
ATTACKS.declare(
    "autoattack", "lipsweep.attacks.autoattack:AutoAttack", spec=AttackVocab("aa_eps", "aa")
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
