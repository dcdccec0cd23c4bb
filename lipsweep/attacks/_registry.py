"""Attack registry: ``@register_attack`` adds a class, ``create_attack(name, **kw)`` builds one.

Registering an attack is what gets it into :class:`~lipsweep.attacks.config.RobustnessConfig`
(``attacks``), the evaluation driver and the registry-parametrized tests.
"""
from __future__ import annotations

import fnmatch
from typing import Callable, TypeVar

_ATTACKS: dict[str, type] = {}

T = TypeVar("T", bound=type)


def register_attack(name: str) -> Callable[[T], T]:
    """Class decorator: register an :class:`~lipsweep.attacks.base.Attack` under ``name``."""

    def deco(cls: T) -> T:
        if name in _ATTACKS:
            raise ValueError(f"attack {name!r} is already registered")
        cls.name = name
        _ATTACKS[name] = cls
        return cls

    return deco


def list_attacks(filter: str = "") -> list[str]:
    """Registered attack names, sorted; ``filter`` is an optional fnmatch pattern."""
    names = sorted(_ATTACKS)
    return [n for n in names if fnmatch.fnmatch(n, filter)] if filter else names


def is_attack(name: str) -> bool:
    return name in _ATTACKS


def get_attack_class(name: str) -> type:
    """The class registered under ``name``; ValueError naming the known ones otherwise."""
    try:
        return _ATTACKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown attack {name!r}; known attacks are {list_attacks()}") \
            from None


def create_attack(name: str, **kwargs):
    """Build attack ``name`` with constructor arguments ``kwargs`` (``model``, ``eps``, ...)."""
    return get_attack_class(name)(**kwargs)
