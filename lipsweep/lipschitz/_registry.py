"""The Lipschitz-estimator family on the one registry mechanism (:mod:`lipsweep.core.registry`).

Torch-free: this is the family's index. Each built-in is declared here by the import path of
its factory with its light facts (``outputs``: the names of the arrays it returns), so a config
naming an estimator (``lip_estimators``) validates without importing torch; the factory's file
adds it with ``@register_estimator(name)``, and so does a plugin or a test (giving
``outputs``).

An estimator measures something about a model's smoothness at a batch of inputs and returns
named per-sample arrays (leading dimension B), so results concatenate over batches and do not
depend on how the evaluation set is split (the registry-parametrized tests check this).
Registering an estimator is what gets it into those tests.

Adding a built-in estimator: its factory in a file of this folder with
``@register_estimator("name")``, and one ``_declare(...)`` line below (docs/architecture.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, TypeVar

from lipsweep.core.registry import Registry

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn


class Estimator(Protocol):
    """``estimator(model, x) -> {name: (B, ...) tensor}``; ``outputs`` lists the names."""

    name: str
    outputs: tuple[str, ...]

    def __call__(self, model: "nn.Module", x: "torch.Tensor") -> dict[str, "torch.Tensor"]: ...


F = TypeVar("F", bound=Callable[..., Any])

ESTIMATORS: Registry[Callable[..., Estimator]] = Registry(
    "estimator",
    lambda name, known: ValueError(f"unknown estimator {name!r}; known estimators are {known}"),
)

_JACOBIAN = ("jacobian_norm", "jacobian_iterations", "jacobian_converged")


def _declare(name: str, impl: str, outputs: Sequence[str]) -> None:
    ESTIMATORS.declare(name, impl, info={"outputs": tuple(outputs)})


# The built-in estimators: name, factory, outputs.
_E = "lipsweep.lipschitz.estimators"
_declare("jacobian_exact", f"{_E}:_jacobian_exact", _JACOBIAN)
_declare("jacobian_lanczos", f"{_E}:_jacobian_lanczos", _JACOBIAN)
_declare("jacobian_power", f"{_E}:_jacobian_power", _JACOBIAN)
_declare(
    "token_jacobian",
    f"{_E}:TokenJacobianNorm",
    ("token_jacobian_norm", "token_jacobian_iterations", "token_jacobian_converged"),
)
_declare("softmax_jacobian", f"{_E}:SoftmaxJacobian", ("softmax_norm", "softmax_g1"))
_declare(
    "head_bounds",
    f"{_E}:HeadBounds",
    ("head_exact", "head_thm1", "head_thm2", "head_thm3", "head_thm3_g1"),
)


def register_estimator(name: str, *, outputs: Optional[Sequence[str]] = None) -> Callable[[F], F]:
    """Decorator: add a class or factory returning an :class:`Estimator` under ``name``. A
    declared estimator keeps its declared ``outputs``; any other gives them (or the class
    has an ``outputs`` attribute)."""

    def deco(factory: F) -> F:
        declared = name in ESTIMATORS and not ESTIMATORS.entry(name).loaded
        outs = outputs if outputs is not None else getattr(factory, "outputs", None)
        if not declared and not outs:
            raise TypeError(f"estimator {name!r} needs its outputs (outputs=...)")
        info = {"outputs": tuple(outs)} if outs and not declared else None
        return ESTIMATORS.add(name, factory, info=info)

    return deco


def unregister_estimator(name: str) -> None:
    """Remove ``name`` (tests register temporary estimators)."""
    ESTIMATORS.remove(name)


def list_estimators(filter: str = "") -> list[str]:
    """Registered estimator names, sorted; ``filter`` is an optional fnmatch pattern."""
    return ESTIMATORS.names(filter)


def is_estimator(name: str) -> bool:
    return name in ESTIMATORS


def estimator_outputs(name: str) -> tuple[str, ...]:
    """The names of the arrays estimator ``name`` returns (nothing imported)."""
    return ESTIMATORS.entry(name).info["outputs"]


def create_estimator(name: str, **kwargs: Any) -> Estimator:
    """Build estimator ``name`` with keyword settings (e.g. ``iters``, ``tol``)."""
    est = ESTIMATORS.create(name, **kwargs)
    est.name = name
    return est
