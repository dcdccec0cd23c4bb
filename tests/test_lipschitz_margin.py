"""||J_f|| per logit margin (lipsweep.lipschitz.margin) against numbers worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from lipsweep.core.config_base import from_mapping
from lipsweep.lipschitz import LipschitzConfig, lipschitz_summary
from lipsweep.lipschitz.margin import (
    MARGIN_FLOOR,
    jacobian_per_margin,
    logit_margin,
    per_margin_metrics,
)
from lipsweep.lipschitz.summary import NPZ_NAME


def test_margin_and_ratio_by_hand():
    logits = torch.tensor([[3.0, 1.0, 0.5], [0.0, 2.0, -1.0], [1.0, 1.0, 0.0]])
    m = logit_margin(logits)
    assert m.tolist() == [2.0, 2.0, 0.0]  # 3-1, 2-0, a tie
    r = jacobian_per_margin(torch.tensor([4.0, 1.0, 3.0]), m)
    assert r.dtype == torch.float64
    assert r.tolist() == pytest.approx([2.0, 0.5, 3.0 / MARGIN_FLOOR])  # finite at a tie
    got = per_margin_metrics(np.array([2.0, 0.5, 1.0, 4.0]))
    # sorted 0.5 1 2 4: mean 7.5/4, median (1+2)/2, p90 at rank 0.9*3 = 2.7: 2 + 0.7*(4-2)
    assert got == pytest.approx(
        {
            "lip_jacobian_per_margin_mean": 1.875,
            "lip_jacobian_per_margin_median": 1.5,
            "lip_jacobian_per_margin_p90": 3.4,
        }
    )
    with pytest.raises(ValueError, match="C >= 2"):
        logit_margin(torch.zeros(3, 1))


def test_summary_logs_the_ratio_and_it_is_scale_free(tmp_path):
    """f(x) = W flat(x): ||J_f|| = sigma_1(W) everywhere; scaling W by 10 scales ||J_f|| and
    the margins by 10 and leaves the ratio unchanged."""
    torch.manual_seed(0)
    lin = nn.Linear(12, 3, bias=False).double()
    model = nn.Sequential(nn.Flatten(), lin)
    x = torch.rand(5, 3, 2, 2, dtype=torch.float64)
    cfg = from_mapping(
        LipschitzConfig,
        {
            "lip_softmax": False,
            "lip_head_bounds": False,
            "lip_figures": False,
            "lip_route": "exact",
            "lip_tokens": False,
        },
    )
    got = lipschitz_summary(model, x, cfg, out_dir=tmp_path)
    w = lin.weight.detach()
    sigma = torch.linalg.matrix_norm(w, ord=2)
    top2 = (x.flatten(1) @ w.T).topk(2, dim=1).values
    ratio = (sigma / (top2[:, 0] - top2[:, 1])).numpy()
    assert got["lip_jacobian_per_margin_median"] == pytest.approx(np.median(ratio), rel=1e-6)
    assert got["lip_jacobian_per_margin_mean"] == pytest.approx(ratio.mean(), rel=1e-6)
    with np.load(tmp_path / NPZ_NAME) as npz:
        assert npz["jacobian_per_margin"] == pytest.approx(ratio, rel=1e-6)
    with torch.no_grad():
        lin.weight.mul_(10)
    scaled = lipschitz_summary(model, x, cfg)
    assert scaled["lip_jacobian_median"] == pytest.approx(10 * got["lip_jacobian_median"])
    assert scaled["lip_jacobian_per_margin_median"] == pytest.approx(
        got["lip_jacobian_per_margin_median"], rel=1e-6
    )
