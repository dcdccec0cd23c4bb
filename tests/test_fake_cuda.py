"""The train step's forward half keeps every tensor on a CUDA device, checked without a GPU.

No CUDA code path can run on the CI machine. PyTorch's FakeTensorMode gives tensors a device
(here ``cuda``) and metadata but no data, and it raises ``FakeTensorDeviceMismatchError`` when
an op mixes devices: a tensor made without ``device=`` (``torch.arange(h)``), a draw on the
host, a CPU constant. :func:`lipsweep.trial.engine.step_loss` (augmentation, timm
Mixup/CutMix, the ViT forward, the regularizer's terms) and :class:`LossMonitor` run there for
each regularizer family. Not covered: the backward pass and the optimizer step (autograd's
engine needs a real CUDA device), and code that reads values (evaluation, attacks).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from lipsweep.data.loading import create_mixup
from lipsweep.regularizers import create_regularizer_from_config
from lipsweep.settings.config import TrialConfig
from lipsweep.trial.engine import LossMonitor, step_loss
from lipsweep.vit.models import create_model

TINY = {"depth": 2, "embed_dim": 64, "num_heads": 4, "batch_size": 8}
AUG = {"mixup": 0.8, "cutmix": 1.0, "label_smoothing": 0.1, "crop_padding": 4, "hflip": True}


@pytest.mark.parametrize(
    "flat",
    [
        {"regularizer": "none"},
        {"regularizer": "jasmin", "k": 10, "aggregation": "mean"},
        {"regularizer": "jasmin", "k": 0, "aggregation": "max"},
        {"regularizer": "specformer"},
    ],
    ids=["none", "jasmin_k10_mean", "jasmin_k0_max", "specformer"],
)
def test_step_forward_stays_on_a_fake_cuda_device(flat: dict) -> None:
    cfg = TrialConfig.from_flat({**TINY, **AUG, **flat})
    dev = torch.device("cuda")
    model = create_model(cfg.model)  # timm's constructor reads values: built for real, moved fake
    reg = create_regularizer_from_config(cfg.regularizer)
    mixup = create_mixup(cfg.data, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available ... Disabling autocast"
        with FakeTensorMode(allow_non_fake_inputs=True):
            model = model.to(dev)
            reg.attach(model)
            xb = torch.zeros(8, 3, 32, 32, dtype=torch.uint8, device=dev)
            yb = torch.zeros(8, dtype=torch.long, device=dev)
            monitor = LossMonitor(dev)
            for step in range(3):  # Mixup, CutMix or neither, by the seeded draw
                parts = step_loss(
                    model,
                    reg,
                    xb,
                    yb,
                    data_cfg=cfg.data,
                    device=dev,
                    precision="bf16",
                    gen=torch.Generator(),  # a CUDA generator needs a driver; train_one_epoch
                    mixup=mixup,  # refuses a host one (test_gpu_suite)
                    mix_seed_value=step,
                )
                monitor.add(torch.stack(parts).float(), step)
    assert all(isinstance(p, FakeTensor) and p.device.type == "cuda" for p in parts)
    assert monitor.sums.device.type == "cuda" and monitor.first_bad.device.type == "cuda"


def test_fake_mode_catches_a_host_tensor() -> None:
    """The check itself: a tensor made without ``device=`` meets a CUDA one and raises."""
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError

    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.zeros(4, device="cuda")
        with pytest.raises(FakeTensorDeviceMismatchError):
            x + torch.arange(4)


@pytest.mark.parametrize(
    ("placement", "where"), [("auto", "cpu"), ("cpu", "cpu"), ("same", "cuda")]
)
def test_small_decompositions_run_where_linalg_placement_says(
    monkeypatch: pytest.MonkeyPatch, placement: str, where: str
) -> None:
    """Head bounds' SVDs and softmax eigvalsh and the Lanczos Ritz eigh, inputs on CUDA.

    ``iters=1`` keeps Lanczos to one step with no convergence read (fake tensors hold no
    values); the spies record the device each decomposition sees.
    """
    from lipsweep.lipschitz import head_bounds_at, head_exact_norm
    from lipsweep.lipschitz.head_bounds import HeadWeights

    seen: dict[str, set[str]] = {}
    for name in ("eigh", "eigvalsh", "matrix_norm"):
        real = getattr(torch.linalg, name)

        def spy(t: torch.Tensor, *a: object, _real=real, _name=name, **k: object) -> object:
            seen.setdefault(_name, set()).add(t.device.type)
            return _real(t, *a, **k)

        monkeypatch.setattr(torch.linalg, name, spy)
    dev = torch.device("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with FakeTensorMode(allow_non_fake_inputs=True):
            x = torch.zeros(2, 5, 8, dtype=torch.float64, device=dev)
            w = HeadWeights(
                *(torch.zeros(2, 8, 4, dtype=torch.float64, device=dev) for _ in range(3)),
                None,
                None,
                None,
                0.5,
            )
            head_bounds_at(x, w, softmax_method="eigvalsh", linalg_placement=placement)
            svd_seen, softmax_seen = seen.pop("matrix_norm"), seen.pop("eigvalsh")
            head_exact_norm(x, w, "lanczos", iters=1, linalg_placement=placement)
            ritz_seen = seen.pop("eigh")
    assert svd_seen == {where} or svd_seen == {where, "cuda"}  # norms of X stay on X's device
    assert softmax_seen == {where} and ritz_seen == {where}


@pytest.mark.parametrize("route", ["exact", "lanczos"])
def test_logit_jacobian_passes_linalg_placement(
    monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """jacobian_norm_result's Gram eigvalsh / Ritz eigh run on linalg_device(x, placement)
    (autograd needs a real device, so this runs on the CPU and checks the plumbing)."""
    from lipsweep.lipschitz import _krylov, jacobian

    asked: list[str] = []

    def spy(device: torch.device, placement: str = "auto") -> torch.device:
        asked.append(placement)
        return _krylov.linalg_device(device, placement)

    monkeypatch.setattr(jacobian, "linalg_device", spy)
    model = torch.nn.Linear(12, 3).double()
    x = torch.randn(4, 12, dtype=torch.float64)
    res = jacobian.jacobian_norm_result(model, x, 20, route=route, linalg_placement="same")
    assert asked == ["same"]
    exact = torch.linalg.matrix_norm(model.weight.detach(), 2)
    torch.testing.assert_close(res.values, exact.expand(4), rtol=1e-6, atol=0)
