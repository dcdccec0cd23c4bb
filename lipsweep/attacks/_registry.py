"""Attack registry: ``@register_attack`` adds a class, ``create_attack(name, **kw)`` builds one.

Registering an attack is what gets it into :class:`~lipsweep.attacks.config.RobustnessConfig`
(``attacks``), the evaluation driver and the registry-parametrized tests.

The built-in attacks are declared here by name with their :class:`AttackVocab` (config field
and metric stem) and the module that defines them, so configs validate without importing torch;
the class module is imported on the first :func:`get_attack_class`.
"""

from __future__ import annotations

import fnmatch
import importlib
from dataclasses import dataclass
from typing import Callable, TypeVar

from lipsweep.core.registry import Registry

_ATTACKS: Registry[type] = Registry("attack")

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class AttackVocab:
    """What configs and metric names need of an attack, known without importing torch."""

    eps_field: str
    """The :class:`RobustnessConfig` field that lists its eps numerators."""
    metric_prefix: str
    """Metric name stem: ``acc_<metric_prefix>_<eps*255>`` (docs/contract.md)."""


_BUILTIN: dict[str, tuple[str, AttackVocab]] = {
    "fgsm": ("lipsweep.attacks._fgsm", AttackVocab("fgsm_eps", "fgsm")),
    "pgd": ("lipsweep.attacks._pgd", AttackVocab("pgd_eps", "pgd")),
    "autoattack": ("lipsweep.attacks.autoattack", AttackVocab("aa_eps", "aa")),
}
"""Built-in attacks: name -> (defining module, vocabulary)."""


def register_attack(name: str) -> Callable[[T], T]:
    """Class decorator: register an :class:`~lipsweep.attacks.base.Attack` under ``name``.
    A built-in gets ``eps_field`` and ``metric_prefix`` from its declaration above; any other
    class sets them itself."""

    def deco(cls: T) -> T:
        if name in _ATTACKS:
            raise ValueError(f"attack {name!r} is already registered")
        cls.name = name
        if name in _BUILTIN:
            vocab = _BUILTIN[name][1]
            cls.eps_field, cls.metric_prefix = vocab.eps_field, vocab.metric_prefix
        return _ATTACKS.add(name, cls)

    return deco


def list_attacks(filter: str = "") -> list[str]:
    """Attack names (built-in and registered), sorted; ``filter``: an optional fnmatch pattern."""
    names = sorted(set(_BUILTIN) | set(_ATTACKS.names()))
    return [n for n in names if fnmatch.fnmatch(n, filter)] if filter else names


def is_attack(name: str) -> bool:
    return name in _BUILTIN or name in _ATTACKS


def attack_vocab(name: str) -> AttackVocab:
    """The config field and metric stem of attack ``name``; torch-free for the built-ins."""
    if name in _BUILTIN:
        return _BUILTIN[name][1]
    cls = get_attack_class(name)
    return AttackVocab(cls.eps_field, cls.metric_prefix)


def get_attack_class(name: str) -> type:
    """The class registered under ``name`` (a built-in's module is imported on first use);
    ValueError naming the known ones otherwise."""
    if name in _BUILTIN and name not in _ATTACKS:
        importlib.import_module(_BUILTIN[name][0])
    if name not in _ATTACKS:
        raise ValueError(f"unknown attack {name!r}; known attacks are {list_attacks()}")
    return _ATTACKS.get(name)


def create_attack(name: str, **kwargs):
    """Build attack ``name`` with constructor arguments ``kwargs`` (``model``, ``eps``, ...)."""
    return get_attack_class(name)(**kwargs)
