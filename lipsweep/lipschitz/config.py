"""Settings of the trial-level Lipschitz summary (docs/science.md §1.1, 1.4, 1.5).

Every field starts with ``lip_`` so the flat trial config stays unambiguous. "images" counts
are the first that-many images of the evaluation set; 0 means all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from lipsweep.core.config_base import ConfigError, check_choice, check_int, check_max, show
from lipsweep.lipschitz._registry import list_estimators

_ROUTES = ("auto", "exact", "lanczos", "power")
_PRECISIONS = ("auto", "fp32", "tf32")
_HEAD_ROUTES = ("auto", "lanczos", "full")
_SOFTMAX_METHODS = ("secular", "eigvalsh")


_MAX = {
    "lip_iters": (10_000, "Lanczos converges in far fewer steps"),
    "lip_head_iters": (100_000, "Lanczos converges in far fewer steps"),
    "lip_batch_size": (65_536, "a batch is held in memory at once"),
}
_MAX_IMAGES = (1_000_000, "more than any evaluation set (CIFAR test: 10,000)")


def _check_count(name: str, value: object, minimum: int) -> None:
    check_int(name, value, minimum)
    check_max(name, value, *_MAX.get(name, _MAX_IMAGES))


def _check_tol(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ConfigError(name, f"must be a number in (0, 1), got {show(value)}")


@dataclass(frozen=True)
class LipschitzConfig:
    """What a trial measures about its own smoothness, and how hard it tries."""

    lip_route: str = "auto"
    """Route of ||J_f(x)||_2: 'auto' (exact up to 32 logits, else Lanczos), 'exact',
    'lanczos' or 'power' (the paper's power iteration)."""
    lip_iters: int = 100
    """Cap on J J^T applications per batch for the iterative routes."""
    lip_tol: float = 1e-3
    """Relative tolerance of the iterative routes on ||J||^2 (their residual estimate; a
    sample that does not meet it within lip_iters counts as not converged)."""
    lip_precision: str = "auto"
    """Matmul precision of the ||J_f|| and token-Jacobian products: 'fp32', 'tf32' (TF32
    matmuls in the products, each value then the strict-fp32 Rayleigh quotient of its
    converged vector, a lower bound) or 'auto': TF32 for the exact route on CUDA (5e-7 from
    fp32 on an H100), fp32 for Lanczos and power (TF32 deviated up to 4e-3 there) and on
    the CPU."""
    lip_batch_size: int = 256
    """Images per batch for every Lipschitz estimate. On an H100 (ViT-B, C = 100, fp32
    Lanczos) 256 takes 12.2 ms/image and 18 GiB against 17.0 ms/image at 64 and 11.6 at 512
    (35 GiB): docs/benchmarks.md, "Lipschitz estimates"."""
    lip_images: int = 500
    """Images for the whole-network ||J_f(x)||_2 distribution (0: all). At C = 10 the exact
    norm costs about as much per image as PGD-4 (C backward passes against PGD's 4 forward +
    backward), so 500 keeps the whole summary below PGD-4 on a 1000-image evaluation set
    (benchmarks/bench_lipschitz.py); 0 measures every evaluation image."""
    lip_tokens: bool = True
    """Also measure ||d f / d T||_2 with respect to the token embeddings T entering the first
    block (``lip_jacobian_tokens_*``, the paper's Fig. 4), on the same images and route."""
    lip_softmax: bool = True
    """Measure g_1(P_i) / ||M(P_i)||_2 over every layer, head and row (paper Fig. 3)."""
    lip_softmax_images: int = 0
    """Images for the softmax-Jacobian ratio (0: all of lip_images)."""
    lip_softmax_method: str = "secular"
    """Exact ||M(P_i)||_2 by the secular equation ('secular', fast) or dense 'eigvalsh'."""
    lip_head_bounds: bool = True
    """Compare Thm 1-3 with the exact Jacobian norm of every head (paper Fig. 6)."""
    lip_head_images: int = 16
    """Images for the per-head exact norms and bounds (0: all of lip_images; costly: 16 keep
    the whole summary below PGD-4 on a 1000-image set, benchmarks/bench_lipschitz.py)."""
    lip_head_route: str = "auto"
    """Exact head norm by 'lanczos', the 'full' Jacobian (small heads only) or 'auto'."""
    lip_head_iters: int = 300
    """Cap on Lanczos steps for the exact head norms (a head not converged within it is NaN,
    never an understated value)."""
    lip_head_tol: float = 1e-8
    """Relative Lanczos residual tolerance for the exact head norms."""
    lip_figures: bool = True
    """Write PNG figures (histograms, bound heatmaps) next to the arrays."""
    lip_estimators: Optional[list[str]] = None
    """Further registered estimators (``lipsweep.lipschitz.list_estimators()``) to run with
    their default settings on the lip_images images; the mean of each output over the images
    is logged as ``lip_<name>_<output>_mean``. None: none (the summary above only)."""

    def __post_init__(self) -> None:
        check_choice("lip_route", self.lip_route, _ROUTES)
        check_choice("lip_precision", self.lip_precision, _PRECISIONS)
        check_choice("lip_head_route", self.lip_head_route, _HEAD_ROUTES)
        check_choice("lip_softmax_method", self.lip_softmax_method, _SOFTMAX_METHODS)
        for name in ("lip_iters", "lip_batch_size", "lip_head_iters"):
            _check_count(name, getattr(self, name), 1)
        for name in ("lip_images", "lip_softmax_images", "lip_head_images"):
            _check_count(name, getattr(self, name), 0)
        _check_tol("lip_tol", self.lip_tol)
        _check_tol("lip_head_tol", self.lip_head_tol)
        if self.lip_estimators is not None:
            if not isinstance(self.lip_estimators, (list, tuple)):
                raise ConfigError(
                    "lip_estimators",
                    f"must be a list of estimator names, got {show(self.lip_estimators)}",
                )
            for name in self.lip_estimators:
                check_choice("lip_estimators", name, list_estimators())
            if len(set(self.lip_estimators)) != len(self.lip_estimators):
                raise ConfigError(
                    "lip_estimators", f"has duplicates: {show(list(self.lip_estimators))}"
                )
        for name in ("lip_tokens", "lip_softmax", "lip_head_bounds", "lip_figures"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be true or false, got {show(getattr(self, name))}")
