"""The attack family's index (torch-free): the family object on the one registry mechanism
(:mod:`lipsweep.core.registry`), and each built-in's settings and declaration.

A member's light facts are its :class:`AttackVocab`: its own settings dataclass, the setting
that lists its eps numerators, its metric stem, its title and its place in the strength order,
so configs, metric names and presenters know them without importing torch. Each built-in is
declared below by the import path of its class, beside its settings (a frozen dataclass
checked once in its ``__post_init__``; errors name the flat key; the eps list its vocabulary
names is checked by the suite, for every attack alike); the class's file adds it with
``@register_attack(name)``. An attack that is not declared (a plugin, a test) passes
``eps_field``, ``metric_prefix`` and ``settings`` to the decorator
(:class:`~lipsweep.core.registry.Family`). The suite,
:class:`~lipsweep.attacks.config.RobustnessConfig`, holds every member's settings;
``cls.from_config(model, eps, suite)`` builds it: ``cls(model, eps, suite.settings[name])``
with the suite's precision, seed and batch size; the settings dataclass is the only home of
an attack's parameters.

Adding a built-in attack: its class in a new file of this folder with
``@register_attack("name")``, and here its settings dataclass and one ``ATTACKS.declare``
line (docs/architecture.md).

Defaults are the paper's (Sec. 5): FGSM and 4-step PGD at eps 2/255 and 4/255, AutoAttack at
2/255 with 10 iterations per attack. eps values are integers, numerators over 255, which is
also how metric names carry them (``acc_pgd_4``; docs/contract.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from lipsweep.core.config_base import (
    ConfigError,
    check_choice,
    check_int,
    check_max,
    check_positive,
    check_range,
    show,
)
from lipsweep.core.metric_names import ACC_CLEAN, ACC_PREFIX
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
    title: str = ""
    """Display name in tables, plot titles and the sweep's recipe (default: the name)."""
    strength: Optional[int] = None
    """Its place in the strength order at one eps (higher: stronger); the sanity check warns
    where a stronger attack leaves more accuracy than a weaker one. None: not compared."""

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


def attack_title(metric_prefix: str) -> str:
    """The title of the attack whose metric stem is ``metric_prefix`` (the stem if none)."""
    for spec in ATTACKS.specs():
        if spec is not None and spec.metric_prefix == metric_prefix:
            return spec.title or metric_prefix
    return metric_prefix


def strength_order() -> tuple[str, ...]:
    """The metric stems of the attacks in the strength order, weakest first."""
    ranked = [s for s in ATTACKS.specs() if s is not None and s.strength is not None]
    return tuple(s.metric_prefix for s in sorted(ranked, key=lambda s: s.strength))


def metric_title(name: str) -> str:
    """Axis title of a metric: ``acc_pgd_4`` -> ``PGD, ε = 4/255``."""
    if name == ACC_CLEAN:
        return "clean accuracy (%)"
    parts = name.split("_")
    if len(parts) == 3 and name.startswith(ACC_PREFIX) and parts[2].isdigit():
        return f"{attack_title(parts[1])}, ε = {parts[2]}/255"
    return name


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


def check_eps_list(name: str, values: Any) -> None:
    """An eps list: distinct integers in [1, 255] (numerators over 255); ConfigError(name).
    The suite checks each attack's eps setting (the one its vocabulary names) with it."""
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


def check_count(name: str, value: Any, minimum: int) -> None:
    """An integer >= ``minimum`` below its bound in ``_MAX`` (the reason in the error)."""
    check_int(name, value, minimum)
    if name in _MAX:
        check_max(name, value, *_MAX[name])


@dataclass(frozen=True)
class FgsmSettings:
    """FGSM (Goodfellow et al. 2015): one signed-gradient step of size eps."""

    fgsm_eps: list[int] = field(default_factory=lambda: [2, 4])
    """FGSM radii, numerators over 255 (metrics ``acc_fgsm_<n>``)."""


@dataclass(frozen=True)
class PgdSettings:
    """PGD (Madry et al. 2018): signed-gradient steps projected on the eps-ball."""

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

    def __post_init__(self) -> None:
        check_count("pgd_steps", self.pgd_steps, 1)
        if self.pgd_step_size is not None:
            check_positive("pgd_step_size", self.pgd_step_size)
            check_range("pgd_step_size", self.pgd_step_size, 0.0, 1.0)
        if not isinstance(self.pgd_random_start, bool):
            raise ConfigError(
                "pgd_random_start", f"must be true or false, got {show(self.pgd_random_start)}"
            )
        check_count("pgd_restarts", self.pgd_restarts, 1)
        if self.pgd_restarts > 1 and not self.pgd_random_start:
            raise ConfigError(
                "pgd_restarts",
                f"{self.pgd_restarts} restarts need "
                "pgd_random_start=true (otherwise every restart is the same)",
            )


@dataclass(frozen=True)
class AutoAttackSettings:
    """AutoAttack (Croce & Hein 2020) through pyautoattack: its standard version or a custom
    list of its attacks."""

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

    def __post_init__(self) -> None:
        check_choice("aa_version", self.aa_version, ("custom", "standard"))
        if not isinstance(self.aa_attacks, (list, tuple)) or not self.aa_attacks:
            raise ConfigError("aa_attacks", f"must be a non-empty list of {list(AA_ATTACKS)}")
        for name in self.aa_attacks:
            check_choice("aa_attacks", name, AA_ATTACKS)
        if len(set(self.aa_attacks)) != len(self.aa_attacks):
            raise ConfigError("aa_attacks", f"has duplicates: {show(list(self.aa_attacks))}")
        check_count("aa_iters", self.aa_iters, 1)
        check_count("aa_restarts", self.aa_restarts, 1)
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


# The built-in attacks: name, class, and its vocabulary (eps setting, metric stem, settings,
# title, strength order).
ATTACKS.declare(
    "fgsm",
    "lipsweep.attacks._fgsm:FGSM",
    spec=AttackVocab("fgsm_eps", "fgsm", FgsmSettings, title="FGSM", strength=0),
)
ATTACKS.declare(
    "pgd",
    "lipsweep.attacks._pgd:PGD",
    spec=AttackVocab("pgd_eps", "pgd", PgdSettings, title="PGD", strength=1),
)
ATTACKS.declare(
    "autoattack",
    "lipsweep.attacks.autoattack:AutoAttack",
    spec=AttackVocab("aa_eps", "aa", AutoAttackSettings, title="AutoAttack", strength=2),
)
