"""Attack registry: ``@register_attack`` adds a class, ``create_attack(name, **kw)`` builds one.

Registering an attack is what gets it into :class:`~lipsweep.attacks.config.RobustnessConfig`
(``attacks``), the evaluation driver and the registry-parametrized tests.
"""
from __future__ import annotations

from typing import Callable, TypeVar

from lipsweep.registry import Registry

_ATTACKS: Registry[type] = Registry("attack")

T = TypeVar("T", bound=type)


def register_attack(name: str) -> Callable[[T], T]:
    """Class decorator: register an :class:`~lipsweep.attacks.base.Attack` under ``name``."""

    def deco(cls: T) -> T:
        if name in _ATTACKS:
            raise ValueError(f"attack {name!r} is already registered")
        cls.name = name
        return _ATTACKS.add(name, cls)

    return deco


def list_attacks(filter: str = "") -> list[str]:
    """Registered attack names, sorted; ``filter`` is an optional fnmatch pattern."""
    return _ATTACKS.names(filter)


def is_attack(name: str) -> bool:
    return name in _ATTACKS


def get_attack_class(name: str) -> type:
    """The class registered under ``name``; ValueError naming the known ones otherwise."""
    return _ATTACKS.get(name)


def create_attack(name: str, **kwargs):
    """Build attack ``name`` with constructor arguments ``kwargs`` (``model``, ``eps``, ...)."""
    return get_attack_class(name)(**kwargs)
