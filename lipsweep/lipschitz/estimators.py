"""The registered estimators: whole-network Jacobian norm (three routes) with respect to the
pixels and to the token embeddings, softmax Jacobian norms and bounds per attention row, and
per-head Lipschitz bounds against the exact norm."""

from __future__ import annotations

import torch
from torch import nn

from lipsweep.lipschitz._registry import register_estimator
from lipsweep.lipschitz.head_bounds import measure_head_bounds
from lipsweep.lipschitz.jacobian import DEFAULT_TOL, jacobian_norm_result
from lipsweep.lipschitz.softmax_jacobian import softmax_jacobian_stats
from lipsweep.lipschitz.token_jacobian import token_jacobian_norm_result


class JacobianNorm:
    """||J_f(x)||_2 per sample by a fixed route (docs/science.md §1.5): ``jacobian_norm`` (B,),
    ``jacobian_iterations`` (B,) and ``jacobian_converged`` (B,)."""

    name = "jacobian"
    outputs = ("jacobian_norm", "jacobian_iterations", "jacobian_converged")

    def __init__(
        self, route: str, iters: int = 100, tol: float = DEFAULT_TOL, precision: str = "auto"
    ) -> None:
        self.route, self.iters, self.tol, self.precision = route, iters, tol, precision

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        res = jacobian_norm_result(
            model, x, self.iters, route=self.route, tol=self.tol, precision=self.precision
        )
        return {
            "jacobian_norm": res.values,
            "jacobian_iterations": res.iterations,
            "jacobian_converged": res.converged,
        }


@register_estimator("jacobian_exact")
def _jacobian_exact(
    iters: int = 100, tol: float = DEFAULT_TOL, precision: str = "auto"
) -> JacobianNorm:
    return JacobianNorm("exact", iters, tol, precision)


@register_estimator("jacobian_lanczos")
def _jacobian_lanczos(
    iters: int = 100, tol: float = DEFAULT_TOL, precision: str = "auto"
) -> JacobianNorm:
    return JacobianNorm("lanczos", iters, tol, precision)


@register_estimator("jacobian_power")
def _jacobian_power(
    iters: int = 100, tol: float = DEFAULT_TOL, precision: str = "auto"
) -> JacobianNorm:
    return JacobianNorm("power", iters, tol, precision)


@register_estimator("token_jacobian")
class TokenJacobianNorm:
    """||d f / d T||_2 per sample, T the tokens entering the first block (paper Fig. 4):
    ``token_jacobian_norm`` (B,), ``token_jacobian_iterations`` (B,) and
    ``token_jacobian_converged`` (B,)."""

    name = "token_jacobian"
    outputs = ("token_jacobian_norm", "token_jacobian_iterations", "token_jacobian_converged")

    def __init__(
        self,
        route: str = "auto",
        iters: int = 100,
        tol: float = DEFAULT_TOL,
        precision: str = "auto",
    ) -> None:
        self.route, self.iters, self.tol, self.precision = route, iters, tol, precision

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        res = token_jacobian_norm_result(
            model, x, self.iters, route=self.route, tol=self.tol, precision=self.precision
        )
        return {
            "token_jacobian_norm": res.values,
            "token_jacobian_iterations": res.iterations,
            "token_jacobian_converged": res.converged,
        }


@register_estimator("softmax_jacobian")
class SoftmaxJacobian:
    """Exact ||M(P_i)||_2 and g_1(P_i) of every layer, head and row (paper Fig. 3):
    ``softmax_norm`` and ``softmax_g1``, (B, L, H, N) float64."""

    name = "softmax_jacobian"
    outputs = ("softmax_norm", "softmax_g1")

    def __init__(self, method: str = "secular") -> None:
        self.method = method

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return softmax_jacobian_stats(model, x, self.method)


@register_estimator("head_bounds")
class HeadBounds:
    """Exact per-head Jacobian norm and Thm 1-3 bounds (paper Fig. 6): ``head_exact``,
    ``head_thm1``, ``head_thm2``, ``head_thm3``, ``head_thm3_g1``, (B, L, H) float64."""

    name = "head_bounds"
    outputs = ("head_exact", "head_thm1", "head_thm2", "head_thm3", "head_thm3_g1")

    def __init__(self, route: str = "auto", iters: int = 300, tol: float = 1e-8) -> None:
        self.route, self.iters, self.tol = route, iters, tol

    def __call__(self, model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return measure_head_bounds(model, x, self.route, self.iters, self.tol)
