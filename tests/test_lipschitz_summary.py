"""The estimator registry (batch invariance, restored state), LipschitzConfig and the trial-level
summary: metric names (docs/contract.md), consistency with the raw arrays, files written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import tiny_model_config

from lipsweep.core.config_base import ConfigError, from_mapping
from lipsweep.lipschitz import (
    LipschitzConfig,
    create_estimator,
    estimator_outputs,
    is_estimator,
    jacobian_spectral_norm,
    lipschitz_summary,
    list_estimators,
)
from lipsweep.lipschitz.summary import FIGURES, NPZ_NAME
from lipsweep.vit.attention import set_fused_attention
from lipsweep.vit.models import attention_modules, create_model

SPEC_METRICS = (
    "lip_jacobian_mean",
    "lip_jacobian_median",
    "lip_jacobian_p90",
    "lip_jacobian_p99",
    "lip_jacobian_max",
)
# Per-estimator tolerance of batch invariance: exact arithmetic paths agree to rounding; the
# iterative ones freeze each sample at its own convergence, so rounding can at most move a
# sample by one check, within the solver tolerance.
INVARIANCE_RTOL = {"jacobian_lanczos": 1e-3, "jacobian_power": 2e-3}
SETTINGS = {"head_bounds": LipschitzConfig(lip_head_route="lanczos")}  # 'full': test_head_bounds


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = tiny_model_config(img_size=16, patch_size=4, depth=2, embed_dim=32, num_heads=2)
    return create_model(cfg).double().eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def test_registry_lists_the_estimators():
    names = list_estimators()
    for name in (
        "jacobian_exact",
        "jacobian_lanczos",
        "jacobian_power",
        "softmax_jacobian",
        "head_bounds",
    ):
        assert name in names and is_estimator(name)
    assert list_estimators("jacobian_*") == ["jacobian_exact", "jacobian_lanczos", "jacobian_power"]
    with pytest.raises(ValueError, match="known estimators"):
        create_estimator("nope")


@pytest.mark.parametrize("name", list_estimators())
def test_estimator_is_invariant_to_batching(name, model, images):
    """Same per-sample results whole, in chunks, and next to other samples."""
    est = create_estimator(name, SETTINGS.get(name))
    rtol = INVARIANCE_RTOL.get(name, 1e-9)
    whole = est(model, images)
    assert set(whole) == set(est.outputs)
    assert tuple(est.outputs) == estimator_outputs(name)  # the index's light facts match
    chunks = [est(model, images[i:j]) for i, j in ((0, 1), (1, 4), (4, 6))]
    others = torch.rand(
        3, 3, 16, 16, generator=torch.Generator().manual_seed(9), dtype=torch.float64
    )
    mixed = est(model, torch.cat([others, images[:3]]))
    for key, val in whole.items():
        assert val.shape[0] == 6
        joined = torch.cat([c[key] for c in chunks])
        torch.testing.assert_close(
            joined.double(),
            val.double(),
            rtol=rtol,
            atol=1e-12,
            msg=f"{name}/{key} depends on the batch split",
        )
        torch.testing.assert_close(
            mixed[key][3:].double(),
            val[:3].double(),
            rtol=rtol,
            atol=1e-12,
            msg=f"{name}/{key} depends on other samples",
        )
    # The estimate describes the samples: different images give different values.
    main = est.outputs[0]
    assert not torch.allclose(mixed[main][:3].double(), whole[main][:3].double())


@pytest.mark.parametrize("name", list_estimators())
def test_estimator_restores_mode_and_fused_flags(name, images):
    torch.manual_seed(1)
    m = create_model(tiny_model_config(img_size=16, depth=1, embed_dim=32, num_heads=2))
    set_fused_attention(m, True)
    m.train()
    create_estimator(name, SETTINGS.get(name))(m, images[:2].float())
    assert m.training and all(mod.training for mod in m.modules())
    assert all(a.fused_attn for a in attention_modules(m))


def test_config_defaults_validate_and_round_trip():
    cfg = LipschitzConfig()
    assert all(f.startswith("lip_") for f in vars(cfg))
    assert from_mapping(LipschitzConfig, vars(cfg)) == cfg
    assert from_mapping(LipschitzConfig, {"lip_tol": "1e-4"}).lip_tol == 1e-4


@pytest.mark.parametrize(
    "field, value",
    [
        ("lip_route", "svd"),
        ("lip_iters", 0),
        ("lip_tol", 0.0),
        ("lip_tol", 1.5),
        ("lip_batch_size", 0),
        ("lip_images", -1),
        ("lip_head_images", 2.5),
        ("lip_head_route", "power"),
        ("lip_softmax_method", "qr"),
        ("lip_head_tol", -1.0),
        ("lip_figures", "yes"),
        ("lip_iters", True),
    ],
)
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ConfigError) as err:
        LipschitzConfig(**{field: value})
    assert err.value.field == field


def _small_cfg(**kw) -> LipschitzConfig:
    base = dict(lip_images=5, lip_softmax_images=4, lip_head_images=2, lip_batch_size=2)
    return LipschitzConfig(**(base | kw))


def test_summary_metrics_arrays_and_figures(model, images, tmp_path):
    set_fused_attention(model, True)
    metrics = lipschitz_summary(model, images, _small_cfg(), out_dir=tmp_path)
    for name in SPEC_METRICS:
        assert name in metrics and np.isfinite(metrics[name])
    assert all(k.startswith("lip_") and isinstance(v, float) for k, v in metrics.items())
    with np.load(tmp_path / NPZ_NAME) as npz:
        jac = npz["jacobian_norm"]
        assert jac.shape == (5,) and str(npz["jacobian_route"]) == "exact"
        assert npz["softmax_norm"].shape == (4, 2, 2, 17)
        assert npz["head_exact"].shape == (2, 2, 2)
        direct = jacobian_spectral_norm(model, images[:5], 10).numpy()
        np.testing.assert_allclose(jac, direct, rtol=1e-10)
        assert metrics["lip_jacobian_median"] == pytest.approx(np.median(jac))
        assert metrics["lip_jacobian_p90"] == pytest.approx(np.percentile(jac, 90))
        assert metrics["lip_jacobian_max"] == pytest.approx(jac.max())
        assert metrics["lip_head_exact_max"] == pytest.approx(npz["head_exact"].max())
    assert metrics["lip_softmax_ratio_min"] >= 1 - 1e-12
    for bound in ("thm2", "thm3", "thm3_g1"):
        assert metrics[f"lip_head_{bound}_ratio_min"] >= 1 - 1e-12
    assert metrics["lip_softmax_rows"] <= 4 * 2 * 2 * 17
    for fname in FIGURES.values():
        assert (tmp_path / fname).stat().st_size > 1000
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes finished
    assert not model.training and all(a.fused_attn for a in attention_modules(model))


def test_per_row_softmax_arrays_are_stored_once_in_float32(model, images, tmp_path):
    """One value per (image, layer, head, row) is 94 M values per array on a
    ViT-B test split; lipschitz.npz keeps them in float32 (they were float64), rounded from the
    exact float64 values, while per-image arrays and every metric stay float64."""
    from lipsweep.lipschitz.softmax_jacobian import softmax_jacobian_stats

    cfg = _small_cfg(lip_head_bounds=False, lip_tokens=False, lip_figures=False)
    metrics = lipschitz_summary(model, images, cfg, out_dir=tmp_path)
    exact = softmax_jacobian_stats(model, images[:4])
    with np.load(tmp_path / NPZ_NAME) as npz:
        for name in ("softmax_norm", "softmax_g1"):
            assert npz[name].dtype == np.float32, name
            # float32 rounding: within one float32 ulp (2^-23 relative) of the float64 value
            np.testing.assert_allclose(npz[name], exact[name].numpy(), rtol=2.0**-23, atol=0)
        assert npz["jacobian_norm"].dtype == np.float64
    ratio = exact["softmax_g1"] / exact["softmax_norm"]
    top = float(ratio[exact["softmax_norm"] > 1e-12].max())
    assert metrics["lip_softmax_ratio_max"] == pytest.approx(top, rel=1e-12)  # from float64


def test_summary_parts_can_be_switched_off(model, images, tmp_path):
    cfg = _small_cfg(
        lip_softmax=False, lip_head_bounds=False, lip_figures=False, lip_route="lanczos"
    )
    metrics = lipschitz_summary(model, images, cfg, out_dir=tmp_path)
    assert set(SPEC_METRICS) <= set(metrics)
    assert not any(k.startswith(("lip_softmax", "lip_head")) for k in metrics)
    assert not list(tmp_path.glob("*.png"))
    with np.load(tmp_path / NPZ_NAME) as npz:
        assert str(npz["jacobian_route"]) == "lanczos" and "softmax_norm" not in npz
    assert lipschitz_summary(model, images[:2], cfg, out_dir=None)["lip_jacobian_max"] > 0


def test_summary_rejects_bad_arguments(model, images):
    with pytest.raises(ValueError, match="LipschitzConfig"):
        lipschitz_summary(model, images, {"lip_images": 2})
    with pytest.raises(ValueError, match="batch"):
        lipschitz_summary(model, images[:0], LipschitzConfig())


def test_a_summary_part_added_from_a_test_module_runs_in_every_summary(model, images):
    """The summary loops over the family: a member declared with ``summary=True`` builds itself
    from the LipschitzConfig, and its metrics, arrays and switch need no change elsewhere."""
    from lipsweep.lipschitz import register_estimator, unregister_estimator
    from lipsweep.lipschitz._registry import EstimatorSpec

    class LogitSize:
        def __init__(self, scale: float) -> None:
            self.scale = scale

        def __call__(self, m, x):
            with torch.no_grad():
                return {"logit_size": m(x).norm(dim=1) * self.scale}

        @classmethod
        def for_summary(cls, cfg, num_classes):
            return (cls(float(num_classes)), 2) if cfg.lip_figures else None

        def summarize(self, arrays):
            return {"lip_logit_size_max": float(arrays["logit_size"].max())}

        def figures(self, arrays, out_dir):
            pass

    register_estimator("logit_size", spec=EstimatorSpec(("logit_size",), summary=True))(LogitSize)
    try:
        base = dict(lip_images=3, lip_tokens=False, lip_softmax=False, lip_head_bounds=False)
        on = lipschitz_summary(model, images, LipschitzConfig(**base))
        off = lipschitz_summary(model, images, LipschitzConfig(**base, lip_figures=False))
    finally:
        unregister_estimator("logit_size")
    with torch.no_grad():
        want = float(model(images[:2]).norm(dim=1).max()) * 10
    assert on["lip_logit_size_max"] == pytest.approx(want, rel=1e-12)
    assert "lip_logit_size_max" not in off and "lip_jacobian_median" in off


def test_an_estimator_reads_its_settings_from_the_lipschitz_config():
    """One home per setting: a built-in estimator's iterations, tolerance, route and method
    are the LipschitzConfig fields (its defaults when built without settings)."""
    default, cfg = LipschitzConfig(), LipschitzConfig(lip_iters=7, lip_head_tol=1e-6)
    assert create_estimator("jacobian_lanczos").iters == default.lip_iters
    assert create_estimator("jacobian_lanczos", cfg).iters == 7
    assert create_estimator("head_bounds", cfg).tol == 1e-6
    assert create_estimator("softmax_jacobian").method == default.lip_softmax_method
    assert create_estimator("token_jacobian").route == default.lip_route
