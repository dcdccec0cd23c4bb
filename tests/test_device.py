"""The device decision of a trial: every case of decide_device, the exit 2 of
`lipsweep train` with device: cuda and no CUDA, and the sweep driver's check."""

from __future__ import annotations

import pytest
import torch

from lipsweep.__main__ import main
from lipsweep.core.config_base import ConfigError
from lipsweep.trial.device import DeviceError, check_sweep_device, decide_device

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.mark.parametrize(
    "requested, gpus, cuda, device, words",
    [
        ("auto", ["0"], True, "cuda", "Ray assigned GPU(s) ['0']"),
        ("auto", [], True, "cpu", "assigned this trial no GPU"),
        ("auto", [], False, "cpu", "assigned this trial no GPU"),
        ("auto", None, True, "cuda", "CUDA is visible"),
        ("auto", None, False, "cpu", "CUDA is not available"),
        ("cpu", ["1"], True, "cpu", "stays idle"),
        ("cpu", None, True, "cpu", "cpu requested"),
        ("cuda", ["0", "1"], True, "cuda", "Ray assigned GPU(s) ['0', '1']"),
        ("cuda", None, True, "cuda", "CUDA is visible"),
        ("cuda:1", [], True, "cuda:1", "cuda:1 requested"),
    ],
)
def test_decide_device_chooses_and_says_why(requested, gpus, cuda, device, words):
    chosen, reason = decide_device(requested, gpus, cuda)
    assert chosen == device
    assert words in reason


@pytest.mark.parametrize(
    "requested, gpus, words",
    [
        ("auto", ["0"], "Ray assigned GPU(s) ['0'], but CUDA is not visible"),
        ("cuda", ["3"], "Ray assigned GPU(s) ['3'] but CUDA is not visible"),
        ("cuda", [], "'cuda' requested but CUDA is not available"),
        ("cuda:0", None, "'cuda:0' requested but CUDA is not available"),
        ("tpu", None, "must be auto, cpu, cuda or cuda:N"),
        ("cuda:one", None, "must be auto, cpu, cuda or cuda:N"),
    ],
)
def test_decide_device_refuses_a_gpu_it_cannot_use(requested, gpus, words):
    with pytest.raises(DeviceError) as info:
        decide_device(requested, gpus, False)
    assert isinstance(info.value, ConfigError) and info.value.field == "device"
    assert words in str(info.value)
    assert "\n" not in info.value.format()


@pytest.mark.parametrize(
    "requested, gpus, count, words",
    [
        ("cuda:1", ["3"], 1, "sees 1 CUDA device(s) (Ray shows a trial only its own GPUs"),
        ("cuda:2", None, 2, "'cuda:2' requested but this process sees 2 CUDA device(s);"),
    ],
)
def test_decide_device_refuses_a_cuda_index_the_process_cannot_see(requested, gpus, count, words):
    with pytest.raises(DeviceError) as info:
        decide_device(requested, gpus, True, count)
    assert words in str(info.value)
    assert decide_device("cuda:0", gpus, True, count)[0] == "cuda:0"
    assert decide_device("cuda", gpus, True, count)[0] == "cuda"


@needs_no_cuda
def test_train_with_device_cuda_and_no_cuda_exits_2_with_one_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["train", "--set", "device=cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "lipsweep train: error: device: 'cuda' requested but CUDA is not available"
    ), err
    assert err.count("\n") == 1 and not out.exists()


@needs_no_cuda
def test_sweep_checks_cuda_on_the_driver_only_when_trials_get_no_gpu():
    trials = [{"device": "auto"}, {"device": "cuda"}]
    with pytest.raises(DeviceError, match="resources.gpu: 0 runs the trials here"):
        check_sweep_device(0, trials)
    check_sweep_device(1, trials)  # the workers decide
    check_sweep_device(2, [{"device": "cuda:1"}])
    with pytest.raises(DeviceError, match=r"only its own 1 GPU\(s\), as cuda:0..cuda:0"):
        check_sweep_device(0.5, [{"device": "cuda:1"}])
    check_sweep_device(0.5, trials)
    check_sweep_device(0, [{"device": "auto"}, {}])
