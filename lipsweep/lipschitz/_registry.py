"""Estimator registry: ``@register_estimator`` adds a factory, ``create_estimator`` builds one.

An estimator measures something about a model's smoothness at a batch of inputs and returns
named per-sample arrays (leading dimension B), so results concatenate over batches and do not
depend on how the evaluation set is split (the registry-parametrized tests check this).
Registering an estimator is what gets it into those tests.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch
from torch import nn

from lipsweep.core.registry import Registry


class Estimator(Protocol):
    """``estimator(model, x) -> {name: (B, ...) tensor}``; ``outputs`` lists the names."""

    name: str
    outputs: tuple[str, ...]

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]: ...


_ESTIMATORS: Registry[Callable[..., Estimator]] = Registry("estimator")


def register_estimator(name: str) -> Callable[[Callable[..., Estimator]], Callable[..., Estimator]]:
    """Decorator: register a class or factory returning an :class:`Estimator` under ``name``."""

    def deco(factory: Callable[..., Estimator]) -> Callable[..., Estimator]:
        if name in _ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        return _ESTIMATORS.add(name, factory)

    return deco


def list_estimators(filter: str = "") -> list[str]:
    """Registered estimator names, sorted; ``filter`` is an optional fnmatch pattern."""
    return _ESTIMATORS.names(filter)


def is_estimator(name: str) -> bool:
    return name in _ESTIMATORS


def create_estimator(name: str, **kwargs) -> Estimator:
    """Build estimator ``name`` with keyword settings (e.g. ``iters``, ``tol``)."""
    est = _ESTIMATORS.get(name)(**kwargs)
    est.name = name
    return est
