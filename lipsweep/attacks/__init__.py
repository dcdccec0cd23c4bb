"""Adversarial evaluation (docs/science.md §1.6): FGSM, PGD and AutoAttack, L-infinity on [0, 1]
pixels.

Public functions (docs/contract.md): :func:`fgsm`, :func:`pgd` return adversarial images in [0, 1];
:func:`evaluate_robustness` runs a :class:`RobustnessConfig` suite and returns the
``acc_*`` metrics. Attacks are registered classes (:func:`create_attack`,
:func:`list_attacks`); :mod:`lipsweep.attacks.checks` holds the sanity checks.

FGSM and PGD live in the private modules ``_fgsm`` / ``_pgd``: a public submodule named
``pgd`` would be shadowed by the function ``pgd`` of the same name here (then
``import lipsweep.attacks.pgd as m`` silently gives the function).
"""

from __future__ import annotations

import importlib
from typing import Any

from lipsweep.attacks._registry import (
    ATTACKS,
    AttackVocab,
    attack_title,
    attack_vocab,
    create_attack,
    get_attack_class,
    is_attack,
    list_attacks,
    metric_title,
    register_attack,
    unregister_attack,
)
from lipsweep.attacks.config import RobustnessConfig

# PEP 562: the torch-backed names load on first use, so a config (and `lipsweep sweep
# --dry-run`) validates without importing torch.
_LAZY = {
    "Attack": "base",
    "attack_mode": "base",
    "FGSM": "_fgsm",
    "fgsm": "_fgsm",
    "PGD": "_pgd",
    "pgd": "_pgd",
    "AutoAttack": "autoattack",
    "AutoAttackResult": "autoattack",
    "AttackStage": "autoattack",
    "evaluate_robustness": "evaluate",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ATTACKS",
    "Attack",
    "AttackVocab",
    "AttackStage",
    "AutoAttack",
    "AutoAttackResult",
    "FGSM",
    "PGD",
    "RobustnessConfig",
    "attack_mode",
    "attack_title",
    "attack_vocab",
    "create_attack",
    "evaluate_robustness",
    "fgsm",
    "get_attack_class",
    "is_attack",
    "list_attacks",
    "metric_title",
    "pgd",
    "register_attack",
    "unregister_attack",
]

# Installed plugins add attacks too, read on the family's first use (core/registry.py).
ATTACKS.use_entry_points("lipsweep.attacks")
