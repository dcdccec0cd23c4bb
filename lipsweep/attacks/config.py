"""The robustness-evaluation suite: which attacks, on how many images, and each attack's own
settings (:mod:`lipsweep.attacks._registry` for the built-ins).

:class:`RobustnessConfig` is the suite's shared settings (``attacks``, ``attack_images``,
``attack_batch_size``, ``attack_precision``, ``attack_seed``) plus one settings dataclass per
member of the attack family that has one, each validated once in its own ``__post_init__``.
Its flat keys are the shared ones plus every member's settings (``fgsm_eps``, ``pgd_steps``,
``aa_iters``, ...): every member's settings are kept, run or not, so a trial's flat dict has
the same keys whatever ``attacks`` lists. ``cfg.pgd_steps`` reads ``cfg.settings["pgd"]``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from lipsweep.attacks._registry import (
    ATTACKS,
    PRECISIONS,
    attack_vocab,
    check_count,
    check_eps_list,
    list_attacks,
    setting_names,
)
from lipsweep.core.config_base import ConfigError, check_choice, from_mapping, show
from lipsweep.core.field_docs import field_docs
from lipsweep.core.metric_names import ACC_CLEAN, attack_metric

# Torch-free: configs (and `lipsweep sweep --dry-run`) validate without importing torch.


@dataclass(frozen=True)
class SuiteSettings:
    """The settings every attack of the suite shares (docs/science.md §1.6); all attacks
    L-infinity on [0, 1] pixels."""

    attacks: list[str] = field(default_factory=lambda: ["fgsm", "pgd", "autoattack"])
    """Attacks to run (registry names, see ``lipsweep.attacks.list_attacks()``)."""
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
        check_count("attack_images", self.attack_images, 0)
        check_count("attack_batch_size", self.attack_batch_size, 1)
        check_choice("attack_precision", self.attack_precision, PRECISIONS)
        check_count("attack_seed", self.attack_seed, 0)


SHARED = tuple(f.name for f in dataclasses.fields(SuiteSettings))


def _member_settings() -> dict[str, type]:
    """Each attack with a settings dataclass: name -> that class, in registration order."""
    return {
        name: cls for name in list_attacks() if (cls := ATTACKS.entry(name).settings) is not None
    }


@dataclass(frozen=True, init=False)
class RobustnessConfig:
    """Adversarial evaluation suite: the shared settings and each attack's own.

    ``RobustnessConfig(attacks=["pgd"], pgd_eps=[8])``: the keywords are flat keys.
    """

    suite: SuiteSettings
    """The shared settings (``attacks``, ``attack_images``, ...)."""
    settings: Mapping[str, Any]
    """Attack name -> its frozen settings dataclass, validated."""

    def __init__(self, **values: Any) -> None:
        self._build(values, coerce=False)

    def _build(self, values: Mapping[str, Any], coerce: bool) -> None:
        members = _member_settings()
        owner = {key: name for name, cls in members.items() for key in setting_names(cls)}
        for key in values:
            if key not in owner and key not in SHARED:
                raise ConfigError(
                    str(key), f"unknown setting; known settings are {sorted(self.flat_keys())}"
                )
        build = from_mapping if coerce else (lambda cls, kw: cls(**kw))
        shared = build(SuiteSettings, {k: v for k, v in values.items() if k in SHARED})
        settings = {
            name: build(cls, {k: v for k, v in values.items() if owner.get(k) == name})
            for name, cls in members.items()
        }
        object.__setattr__(self, "suite", shared)
        object.__setattr__(self, "settings", settings)
        self._check_eps()

    def _check_eps(self) -> None:
        for name in list_attacks():
            eps_field = attack_vocab(name).eps_field
            try:
                values = getattr(self, eps_field)
            except AttributeError:
                raise ConfigError(
                    "attacks",
                    f"attack {name!r} reads its eps from {eps_field!r}, which is not a "
                    "robustness setting",
                ) from None
            check_eps_list(eps_field, values)
            if name in self.attacks and not values:
                raise ConfigError(
                    eps_field,
                    f"is empty but attacks includes {name!r}; give at "
                    f"least one eps or drop {name!r} from attacks",
                )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("suite", "settings"):
            raise AttributeError(name)
        for part in (self.suite, *self.settings.values()):
            if hasattr(part, name):
                return getattr(part, name)
        raise AttributeError(f"{type(self).__name__} has no setting {name!r}")

    def replace(self, **changes: Any) -> "RobustnessConfig":
        """A copy with some flat keys changed (validated again)."""
        return type(self)(**{**self.to_flat(), **changes})

    def to_flat(self) -> dict[str, Any]:
        """Every flat key and its value: Tune sample / MLflow params."""
        flat = dataclasses.asdict(self.suite)
        for settings in self.settings.values():
            flat.update(dataclasses.asdict(settings))
        return flat

    @classmethod
    def from_flat(cls, values: Mapping[str, Any]) -> "RobustnessConfig":
        """Build from this section's flat keys, coerced to their types (YAML strings such as
        ``1e-3``); another key is a ConfigError naming it."""
        cfg = cls.__new__(cls)
        cfg._build(values, coerce=True)
        return cfg

    @staticmethod
    def flat_keys() -> tuple[str, ...]:
        """The shared settings and every attack's own: this section's flat keys."""
        return (*SHARED, *(k for cls in _member_settings().values() for k in setting_names(cls)))

    @staticmethod
    def flat_defaults() -> dict[str, Any]:
        """Each flat key's value when left out (``--help-settings``)."""
        return RobustnessConfig().to_flat()

    @classmethod
    def __field_docs__(cls) -> dict[str, str]:
        """Field docs for ``--help-settings``, from the shared and the members' dataclasses."""
        docs = field_docs(SuiteSettings)
        for settings in _member_settings().values():
            docs.update(field_docs(settings))
        return docs

    def metric_names(self) -> list[str]:
        """The accuracy metrics this suite reports, in order (``acc_clean`` first)."""
        names = [ACC_CLEAN]
        for name in self.attacks:
            vocab = attack_vocab(name)
            names += [attack_metric(vocab.metric_prefix, n) for n in getattr(self, vocab.eps_field)]
        return names
