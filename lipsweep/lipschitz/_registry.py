"""Estimator registry: ``@register_estimator`` adds a factory, ``create_estimator`` builds one.

An estimator measures something about a model's smoothness at a batch of inputs and returns
named per-sample arrays (leading dimension B), so results concatenate over batches and do not
depend on how the evaluation set is split (the registry-parametrized tests check this).
Registering an estimator is what gets it into those tests.
"""
from __future__ import annotations

import fnmatch
from typing import Callable, Protocol

import torch
from torch import nn


class Estimator(Protocol):
    """``estimator(model, x) -> {name: (B, ...) tensor}``; ``outputs`` lists the names."""

    name: str
    outputs: tuple[str, ...]

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]: ...


_ESTIMATORS: dict[str, Callable[..., Estimator]] = {}


def register_estimator(name: str) -> Callable[[Callable[..., Estimator]],
                                              Callable[..., Estimator]]:
    """Decorator: register a class or factory returning an :class:`Estimator` under ``name``."""

    def deco(factory: Callable[..., Estimator]) -> Callable[..., Estimator]:
        if name in _ESTIMATORS:
            raise ValueError(f"estimator {name!r} is already registered")
        _ESTIMATORS[name] = factory
        return factory

    return deco


def list_estimators(filter: str = "") -> list[str]:
    """Registered estimator names, sorted; ``filter`` is an optional fnmatch pattern."""
    names = sorted(_ESTIMATORS)
    return [n for n in names if fnmatch.fnmatch(n, filter)] if filter else names


def is_estimator(name: str) -> bool:
    return name in _ESTIMATORS


def create_estimator(name: str, **kwargs) -> Estimator:
    """Build estimator ``name`` with keyword settings (e.g. ``iters``, ``tol``)."""
    try:
        factory = _ESTIMATORS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown estimator {name!r}; known estimators are "
                         f"{list_estimators()}") from None
    est = factory(**kwargs)
    est.name = name
    return est
