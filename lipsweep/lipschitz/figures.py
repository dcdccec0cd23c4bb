"""PNG figures of the Lipschitz summary: the ||J_f|| histograms w.r.t. pixels and w.r.t. the
token embeddings (the latter is the paper's Fig. 4), the
g_1 / ||M|| histogram (Fig. 3) and the per-head bound heatmaps in log10 (Fig. 6).

matplotlib is imported inside each function and only its object-oriented ``Figure`` is used,
so no pyplot backend or global state is touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

HEAD_PANELS = (
    ("head_exact", "Exact"),
    ("head_thm1", "Thm 1 as stated (Hu et al.; not a bound)"),
    ("head_thm2", "Thm 2 (Castin et al.)"),
    ("head_thm3", "Thm 3"),
    ("head_thm3_g1", "Thm 3 with g_1"),
)
"""(array name, panel title) of the head-bound heatmaps, in the paper's order."""


def _save(fig, path: Path) -> Path:
    """Atomic write: render to a temporary file next to ``path``, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    os.replace(tmp, path)
    return path


def plot_jacobian_histogram(values: np.ndarray, path: Path, wrt: str = "pixels") -> Path:
    """Histogram of per-sample ||J_f||_2 with mean and median marked; ``wrt`` is 'pixels'
    (d logits / d x) or 'tokens' (d logits / d T, the token embeddings: paper Fig. 4)."""
    from matplotlib.figure import Figure

    values = np.asarray(values, dtype=float)
    fig = Figure(figsize=(5, 3.4))
    ax = fig.add_subplot()
    ax.hist(values, bins=min(50, max(10, values.size // 10)), color="tab:blue", alpha=0.8)
    ax.axvline(np.mean(values), color="k", ls="--", lw=1, label=f"mean {np.mean(values):.3g}")
    ax.axvline(
        np.median(values), color="tab:red", ls=":", lw=1.2, label=f"median {np.median(values):.3g}"
    )
    ax.set_xlabel(
        r"$\|J_f(x)\|_2$ (logits w.r.t. pixels)"
        if wrt == "pixels"
        else r"$\|\partial f / \partial T\|_2$ (logits w.r.t. token embeddings; Fig. 4)"
    )
    ax.set_ylabel("images")
    ax.set_title(f"Local Lipschitz constant, {values.size} images")
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_softmax_ratio_histogram(ratio: np.ndarray, path: Path) -> Path:
    """Histogram of g_1(P_i) / ||M(P_i)||_2 over layers, heads, rows and images (>= 1)."""
    from matplotlib.figure import Figure

    ratio = np.asarray(ratio, dtype=float)
    fig = Figure(figsize=(5, 3.4))
    ax = fig.add_subplot()
    ax.hist(ratio, bins=60, color="tab:green", alpha=0.85)
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel(r"$g_1(P_i)\,/\,\|M(P_i)\|_2$")
    ax.set_ylabel("attention rows")
    ax.set_title(f"Softmax Jacobian bound / exact ({ratio.size} rows, min {ratio.min():.6f})")
    return _save(fig, path)


def plot_head_bounds(arrays: dict[str, np.ndarray], path: Path) -> Path:
    """log10 heatmaps (layer x head) of the exact head norm and each bound, image-averaged."""
    from matplotlib.figure import Figure

    panels = [(k, t) for k, t in HEAD_PANELS if k in arrays]
    means = {k: np.log10(np.asarray(arrays[k], dtype=float).mean(0)) for k, _ in panels}
    fig = Figure(figsize=(3.6 * len(panels), 3.6), layout="constrained")
    for i, (key, title) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        img = ax.imshow(means[key], cmap="viridis", aspect="auto")
        layers, heads = means[key].shape
        for li in range(layers):
            for hi in range(heads):
                ax.text(
                    hi,
                    li,
                    f"{means[key][li, hi]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="w",
                )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(heads))
        ax.set_yticks(range(layers))
        fig.colorbar(img, ax=ax, shrink=0.85)
    n_img = np.asarray(arrays[panels[0][0]]).shape[0]
    fig.suptitle(
        f"log10 local Lipschitz constant of each attention head (mean over {n_img} "
        f"images; one colour scale per panel)",
        fontsize=10,
    )
    return _save(fig, path)
