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
``@register_estimator("name")``, and one ``ESTIMATORS.declare(...)`` line below
(docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

from lipsweep.core.registry import Family

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn

    from lipsweep.lipschitz.config import LipschitzConfig


class Estimator(Protocol):
    """``estimator(model, x) -> {name: (B, ...) tensor}``; ``outputs`` lists the names."""

    name: str
    outputs: tuple[str, ...]

    def __call__(self, model: "nn.Module", x: "torch.Tensor") -> dict[str, "torch.Tensor"]: ...


@dataclass(frozen=True)
class EstimatorSpec:
    """What a config needs of an estimator, known without importing torch."""

    outputs: tuple[str, ...]
    """The names of the per-sample arrays it returns."""
    summary: bool = False
    """A part of the trial's summary: its class has ``for_summary``, ``summarize`` and
    ``figures`` (:mod:`lipsweep.lipschitz.estimators`)."""

    def __post_init__(self) -> None:
        if not self.outputs or not all(isinstance(o, str) and o for o in self.outputs):
            raise TypeError(f"an estimator needs its outputs (names), got {self.outputs!r}")
        object.__setattr__(self, "outputs", tuple(self.outputs))


ESTIMATORS: Family[Callable[..., Estimator]] = Family(
    "estimator",
    spec_type=EstimatorSpec,
    unknown=lambda name, known: ValueError(
        f"unknown estimator {name!r}; known estimators are {known}"
    ),
)

_JACOBIAN = EstimatorSpec(
    ("jacobian_norm", "jacobian_iterations", "jacobian_converged", "logit_margin"), summary=True
)

# The built-in estimators, in the order the summary runs them: name, class, outputs.
_E = "lipsweep.lipschitz.estimators"
ESTIMATORS.declare("jacobian_exact", f"{_E}:JacobianExact", spec=_JACOBIAN)
ESTIMATORS.declare("jacobian_lanczos", f"{_E}:JacobianLanczos", spec=_JACOBIAN)
ESTIMATORS.declare("jacobian_power", f"{_E}:JacobianPower", spec=_JACOBIAN)
ESTIMATORS.declare(
    "token_jacobian",
    f"{_E}:TokenJacobianNorm",
    spec=EstimatorSpec(
        ("token_jacobian_norm", "token_jacobian_iterations", "token_jacobian_converged"),
        summary=True,
    ),
)
ESTIMATORS.declare(
    "softmax_jacobian",
    f"{_E}:SoftmaxJacobian",
    spec=EstimatorSpec(("softmax_norm", "softmax_g1"), summary=True),
)
ESTIMATORS.declare(
    "head_bounds",
    f"{_E}:HeadBounds",
    spec=EstimatorSpec(
        ("head_exact", "head_thm1", "head_thm2", "head_thm3", "head_thm3_g1"), summary=True
    ),
)

# The family's names (methods of the one family object): ``@register_estimator("name")`` adds a
# class or factory (an undeclared one gives ``outputs=`` or has an ``outputs`` attribute).
register_estimator = ESTIMATORS.register
unregister_estimator = ESTIMATORS.unregister
list_estimators = ESTIMATORS.names
is_estimator = ESTIMATORS.is_member


def estimator_outputs(name: str) -> tuple[str, ...]:
    """The names of the arrays estimator ``name`` returns (nothing imported)."""
    return ESTIMATORS.spec(name).outputs


def create_estimator(name: str, settings: Optional["LipschitzConfig"] = None) -> Estimator:
    """Build estimator ``name``; a built-in reads its settings (``lip_iters``, ``lip_tol``, ...)
    from ``settings``, the trial's :class:`~lipsweep.lipschitz.config.LipschitzConfig` (its
    defaults if None). A member without settings (a plugin) is built with no argument."""
    est = ESTIMATORS.create(name) if settings is None else ESTIMATORS.create(name, settings)
    est.name = name
    return est
