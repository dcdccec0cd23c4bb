"""The robustness-evaluation suite: which attacks, at which eps, on how many images.

Defaults are the paper's (Sec. 5): FGSM and 4-step PGD at eps 2/255 and 4/255, AutoAttack at
2/255 with 10 iterations per attack. eps values are integers, numerators over 255, which is
also how metric names carry them (``acc_pgd_4``; docs/contract.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from lipsweep.attacks._registry import attack_vocab, list_attacks
from lipsweep.core.config_base import (
    ConfigError,
    check_choice,
    check_int,
    check_max,
    check_positive,
    check_range,
    show,
)
from lipsweep.core.metric_names import ACC_CLEAN, attack_metric

# Torch-free: configs (and `lipsweep sweep --dry-run`) validate without importing torch.
PRECISIONS = ("fp32", "bf16")
"""Precisions of the attacks' forward/backward passes."""
AA_ATTACKS = ("apgd-ce", "apgd-dlr", "fab", "square", "apgd-t", "fab-t")
"""Attack names pyautoattack understands."""
STANDARD_ATTACKS = ("apgd-ce", "apgd-t", "fab-t", "square")
"""The standard version's attacks, in its running order."""
STANDARD_ITERS = 100

# Upper bounds; the reason goes into the error (a typo such as aa_iters 1e9 would run forever).
_MAX = {
    "pgd_steps": (10_000, "the paper runs 4"),
    "pgd_restarts": (100, "each restart is a full PGD run"),
    "aa_iters": (10_000, "standard AutoAttack runs 100"),
    "aa_restarts": (100, "each restart is a full APGD/FAB run"),
    "attack_images": (1_000_000, "more than any evaluation set (CIFAR test: 10,000)"),
    "attack_batch_size": (65_536, "a batch is held in memory at once"),
}


def _check_eps_list(name: str, values: list[int]) -> None:
    if not isinstance(values, (list, tuple)):
        raise ConfigError(
            name, f"must be a list of integers (eps numerators over 255), got {show(values)}"
        )
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 255:
            raise ConfigError(
                name,
                f"entries are eps numerators over 255, integers in "
                f"[1, 255] (4 means 4/255); got {show(v)}",
            )
    if len(set(values)) != len(values):
        raise ConfigError(name, f"has duplicates: {show(list(values))}")


def _check_int(name: str, value: int, minimum: int) -> None:
    check_int(name, value, minimum)
    if name in _MAX:
        check_max(name, value, *_MAX[name])


@dataclass(frozen=True)
class RobustnessConfig:
    """Adversarial evaluation suite (docs/science.md §1.6); all attacks L-infinity on [0, 1]
    pixels. The attack family's settings: each attack reads its eps list from the field its
    declaration names (:mod:`lipsweep.attacks._registry`) and the rest in ``from_config``."""

    attacks: list[str] = field(default_factory=lambda: ["fgsm", "pgd", "autoattack"])
    """Attacks to run (registry names, see ``lipsweep.attacks.list_attacks()``)."""
    fgsm_eps: list[int] = field(default_factory=lambda: [2, 4])
    """FGSM radii, numerators over 255 (metrics ``acc_fgsm_<n>``)."""
    pgd_eps: list[int] = field(default_factory=lambda: [2, 4])
    """PGD radii, numerators over 255 (metrics ``acc_pgd_<n>``)."""
    pgd_steps: int = 4
    """PGD gradient steps (paper: 4)."""
    pgd_step_size: Optional[float] = None
    """PGD step in pixel units, the same for every eps (Hu et al.'s code: 2/255 =
    0.00784313725490196); None means 2.5 * eps / pgd_steps (Madry et al.)."""
    pgd_random_start: bool = True
    """Start PGD from a uniform random point of the eps-ball."""
    pgd_restarts: int = 1
    """PGD random restarts; the worst case per image over them is reported."""
    aa_eps: list[int] = field(default_factory=lambda: [2])
    """AutoAttack radii, numerators over 255 (metrics ``acc_aa_<n>``)."""
    aa_version: str = "custom"
    """'custom' (aa_attacks, aa_iters, aa_restarts) or 'standard' (pyautoattack's standard
    AutoAttack unchanged: needs aa_iters=100 and the standard attack list)."""
    aa_attacks: list[str] = field(default_factory=lambda: list(STANDARD_ATTACKS))
    """AutoAttack attacks in running order (pyautoattack names)."""
    aa_iters: int = 10
    """Iterations per AutoAttack attack (APGD/FAB iterations, Square queries; paper: 10)."""
    aa_restarts: int = 1
    """Restarts of APGD and FAB in the custom version (the package's custom default is 5)."""
    attack_images: int = 1000
    """Evaluate on the first this-many images of the evaluation data (0: all of them)."""
    attack_batch_size: int = 256
    """Images per batch for every attack."""
    attack_precision: str = "fp32"
    """'fp32' or 'bf16' (autocast) for the attacks' forward/backward passes; accuracies are
    always computed in fp32."""
    attack_seed: int = 0
    """Seed of the PGD random starts and of AutoAttack."""

    def __post_init__(self) -> None:
        if not isinstance(self.attacks, (list, tuple)) or not self.attacks:
            raise ConfigError(
                "attacks", f"must be a non-empty list of {list_attacks()}, got {show(self.attacks)}"
            )
        for name in self.attacks:
            check_choice("attacks", name, list_attacks())
        if len(set(self.attacks)) != len(self.attacks):
            raise ConfigError("attacks", f"has duplicates: {show(list(self.attacks))}")
        for name in list_attacks():
            eps_field = attack_vocab(name).eps_field
            if not hasattr(self, eps_field):
                raise ConfigError(
                    "attacks",
                    f"attack {name!r} reads its eps from {eps_field!r}, which is not a "
                    "robustness setting",
                )
            _check_eps_list(eps_field, getattr(self, eps_field))
            if name in self.attacks and not getattr(self, eps_field):
                raise ConfigError(
                    eps_field,
                    f"is empty but attacks includes {name!r}; give at "
                    f"least one eps or drop {name!r} from attacks",
                )
        _check_int("pgd_steps", self.pgd_steps, 1)
        if self.pgd_step_size is not None:
            check_positive("pgd_step_size", self.pgd_step_size)
            check_range("pgd_step_size", self.pgd_step_size, 0.0, 1.0)
        if not isinstance(self.pgd_random_start, bool):
            raise ConfigError(
                "pgd_random_start", f"must be true or false, got {show(self.pgd_random_start)}"
            )
        _check_int("pgd_restarts", self.pgd_restarts, 1)
        if self.pgd_restarts > 1 and not self.pgd_random_start:
            raise ConfigError(
                "pgd_restarts",
                f"{self.pgd_restarts} restarts need "
                "pgd_random_start=true (otherwise every restart is the same)",
            )
        check_choice("aa_version", self.aa_version, ("custom", "standard"))
        if not isinstance(self.aa_attacks, (list, tuple)) or not self.aa_attacks:
            raise ConfigError("aa_attacks", f"must be a non-empty list of {list(AA_ATTACKS)}")
        for name in self.aa_attacks:
            check_choice("aa_attacks", name, AA_ATTACKS)
        if len(set(self.aa_attacks)) != len(self.aa_attacks):
            raise ConfigError("aa_attacks", f"has duplicates: {show(list(self.aa_attacks))}")
        _check_int("aa_iters", self.aa_iters, 1)
        _check_int("aa_restarts", self.aa_restarts, 1)
        if self.aa_version == "standard":
            if self.aa_iters != STANDARD_ITERS:
                raise ConfigError(
                    "aa_iters",
                    f"aa_version='standard' runs {STANDARD_ITERS} "
                    f"iterations; set aa_iters={STANDARD_ITERS} or use "
                    "aa_version='custom'",
                )
            if list(self.aa_attacks) != list(STANDARD_ATTACKS) or self.aa_restarts != 1:
                raise ConfigError(
                    "aa_attacks",
                    f"aa_version='standard' runs "
                    f"{list(STANDARD_ATTACKS)} with aa_restarts=1; use "
                    "aa_version='custom' for other settings",
                )
        _check_int("attack_images", self.attack_images, 0)
        _check_int("attack_batch_size", self.attack_batch_size, 1)
        check_choice("attack_precision", self.attack_precision, PRECISIONS)
        _check_int("attack_seed", self.attack_seed, 0)

    def metric_names(self) -> list[str]:
        """The accuracy metrics this suite reports, in order (``acc_clean`` first)."""
        names = [ACC_CLEAN]
        for name in self.attacks:
            vocab = attack_vocab(name)
            names += [attack_metric(vocab.metric_prefix, n) for n in getattr(self, vocab.eps_field)]
        return names
