"""Adversarial evaluation (SPEC §2.6): FGSM, PGD and AutoAttack, L-infinity on [0, 1] pixels.

Public functions (SPEC §3): :func:`fgsm`, :func:`pgd` return adversarial images in [0, 1];
:func:`evaluate_robustness` runs a :class:`RobustnessConfig` suite and returns the
``acc_*`` metrics. Attacks are registered classes (:func:`create_attack`,
:func:`list_attacks`); :mod:`lipsweep.attacks.checks` holds the sanity checks.

FGSM and PGD live in the private modules ``_fgsm`` / ``_pgd``: a public submodule named
``pgd`` would be shadowed by the function ``pgd`` of the same name here (then
``import lipsweep.attacks.pgd as m`` silently gives the function).
"""
from __future__ import annotations

from lipsweep.attacks._registry import (create_attack, get_attack_class, is_attack,
                                        list_attacks, register_attack)
from lipsweep.attacks.base import Attack, attack_mode
from lipsweep.attacks._fgsm import FGSM, fgsm
from lipsweep.attacks._pgd import PGD, pgd
from lipsweep.attacks.autoattack import AutoAttack, AutoAttackResult, AttackStage
from lipsweep.attacks.config import RobustnessConfig
from lipsweep.attacks.evaluate import evaluate_robustness

__all__ = [
    "Attack", "AttackStage", "AutoAttack", "AutoAttackResult", "FGSM", "PGD",
    "RobustnessConfig", "attack_mode", "create_attack", "evaluate_robustness", "fgsm",
    "get_attack_class", "is_attack", "list_attacks", "pgd", "register_attack",
]
