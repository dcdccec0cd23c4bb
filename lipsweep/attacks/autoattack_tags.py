"""What an AutoAttack run is, in words: its settings (:func:`describe`) and the MLflow tags
that say which AutoAttack made a metric. Torch-free, so the sweep driver tags a
trial's runs without importing torch (``sweep/callbacks.py``)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from lipsweep.attacks._registry import STANDARD_ATTACKS

STANDARD_SQUARE_QUERIES = 5000
"""The standard version's Square budget (its APGD/FAB run ``STANDARD_ITERS`` iterations)."""


def describe(version: str, attacks: Sequence[str], iters: int, restarts: int) -> dict[str, Any]:
    """The settings that define an AutoAttack run (see :meth:`AutoAttack.describe`)."""
    standard = version == "standard"
    return {
        "version": version,
        "attacks": ",".join(attacks),
        "iters": iters,
        "restarts": restarts,
        "square_queries": STANDARD_SQUARE_QUERIES if standard else iters,
    }


def describe_config(cfg) -> dict[str, Any]:
    """:func:`describe` of a :class:`~lipsweep.attacks.config.RobustnessConfig`'s AutoAttack."""
    standard = cfg.aa_version == "standard"
    return describe(
        cfg.aa_version,
        STANDARD_ATTACKS if standard else cfg.aa_attacks,
        cfg.aa_iters,
        cfg.aa_restarts,
    )


def autoattack_tags(
    metric: str,
    description: dict[str, Any],
    n_images: Optional[int],
    eps: Optional[int] = None,
    prefix: str = "aa",
) -> dict[str, str]:
    """MLflow tags saying which AutoAttack produced ``metric`` (every AutoAttack
    metric says which attack it is).

    ``description`` is :meth:`AutoAttack.describe`; the result holds ``<prefix>.version``,
    ``<prefix>.attacks``, ``<prefix>.iters``, ``<prefix>.restarts``,
    ``<prefix>.square_queries``, ``<prefix>.images`` and one sentence under
    ``attack.<metric>``, e.g. ``attack.acc_aa_2``.
    """
    tags = {f"{prefix}.{k}": str(v) for k, v in description.items()}
    if n_images is not None:
        tags[f"{prefix}.images"] = str(int(n_images))
    at = f" at eps {eps}/255" if eps is not None else ""
    on = f" on {int(n_images)} images" if n_images is not None else ""
    tags[f"attack.{metric}"] = (
        f"AutoAttack version={description['version']} ({description['attacks']}; "
        f"{description['iters']} iterations, {description['restarts']} restart(s), Square "
        f"{description['square_queries']} queries){at}{on}"
    )
    return tags
