"""benchmarks/gpu_suite.py and `lipsweep train` run where Ray, MLflow and Optuna are missing.

The GPU machine has torch and timm but no Ray, MLflow or Optuna. These tests
run both entry points in a subprocess whose ``sitecustomize`` (put first on PYTHONPATH) makes
every import of those packages raise ImportError and log the attempt, so an import that a
``try/except ImportError`` would swallow still fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _sweep_helpers import NONE, space_file
from conftest import bench_module

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("ray", "mlflow", "optuna")

SITECUSTOMIZE = f'''
import os, sys

class _Blocker:
    """Meta-path finder: importing {BLOCKED} raises ImportError and is logged."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            with open(os.environ["GPU_SUITE_BLOCK_LOG"], "a") as fh:
                fh.write(name + "\\n")
            raise ImportError(f"{{name}} is blocked (the GPU machine has no Ray/MLflow/Optuna)")
        return None

sys.meta_path.insert(0, _Blocker())
'''


def _blocked_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "blocked_imports.txt"
    log.write_text("")
    env = dict(
        os.environ,
        GPU_SUITE_BLOCK_LOG=str(log),
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
    )
    return env, log


def _run(cmd: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_blocker_blocks_ray_mlflow_optuna(tmp_path: Path) -> None:
    env, log = _blocked_env(tmp_path)
    code = (
        "import importlib\nfor m in ('ray', 'mlflow', 'optuna'):\n"
        "    try:\n        importlib.import_module(m)\n"
        "    except ImportError:\n        print('blocked', m)\n"
    )
    proc = _run([sys.executable, "-c", code], env, 60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["blocked", "ray", "blocked", "mlflow", "blocked", "optuna"]
    assert log.read_text().split() == list(BLOCKED)


@pytest.mark.slow
def test_lipsweep_train_needs_no_ray_mlflow_optuna(tmp_path: Path) -> None:
    env, log = _blocked_env(tmp_path)
    out = tmp_path / "run"
    proc = _run(
        [
            sys.executable,
            "-m",
            "lipsweep",
            "train",
            "configs/tiny.yaml",
            "--set",
            "epochs=1",
            "--set",
            "depth=1",
            "--set",
            "train_size=64",
            "--set",
            "eval_size=16",
            "--set",
            "evaluate=false",
            "--out",
            str(out),
        ],
        env,
        300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert log.read_text() == "", f"lipsweep train imported {log.read_text().split()}"
    assert "acc_clean" in json.loads((out / "metrics.json").read_text())


@pytest.mark.slow
def test_gpu_suite_cpu_quick(tmp_path: Path) -> None:
    """The whole suite, --device cpu --quick: every section and key, no errors, no Ray."""
    env, log = _blocked_env(tmp_path)
    out = tmp_path / "suite.json"
    # a generous budget and caps: on a loaded CI box every phase still runs to its end; the
    # smoke trial comes first and, capped at 30 s, is skipped (under the 60 s it needs)
    proc = _run(
        [
            sys.executable,
            "benchmarks/gpu_suite.py",
            "--device",
            "cpu",
            "--quick",
            "--budget-s",
            "1200",
            "--cap-scale",
            "10",
            "--smoke-trial",
            "search_spaces/smoke.yaml",
            "--cap",
            "smoke_trial=30",
            "--out",
            str(out),
        ],
        env,
        900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert log.read_text() == "", f"gpu_suite imported {log.read_text().split()}"
    data = json.loads(out.read_text())
    assert data["errors"] == [], data["errors"]
    assert data["meta"]["quick"] is True and data["meta"]["device"] == "cpu"
    for section in ("train", "regularizers", "attacks", "lipschitz", "checkpoint", "trial"):
        assert section in data and "error" not in data[section], section
    phases = data["meta"]["phases"]
    assert [p["name"] for p in phases] == ["smoke_trial"] + [p.name for p in _suite_module().PHASES]
    assert phases[0]["status"] == "skipped" and phases[0]["cap_s"] == 30
    assert all(p["status"] == "done" for p in phases[1:]), phases
    assert all(p["seconds"] <= p["cap_s"] + 1 for p in phases), phases
    assert data["meta"]["space"] == "search_spaces/paper_cifar100.yaml"

    train = data["train"]
    assert train["flops_per_image"] > 0 and train["matmul"]["bf16_tflops"] > 0
    for mode in ("fp32", "tf32", "bf16"):
        for batch in (8, 16):
            run = train["runs"][f"{mode}_b{batch}"]
            assert run["step_ms"] > 0 and run["mfu_vs_bf16_matmul"] > 0
            assert run["peak_mem_gib"] is None  # CPU: no CUDA allocator
    assert train["flop_counter"]["ratio_to_analytic"] > 0
    assert train["runs"]["bf16_compile_b8"]["step_ms"] > 0
    assert train["runs"]["bf16_compile_b8"]["compile_s"] > 0
    assert train["runs"]["bf16_compile_b8"]["graph"] == "static"

    regs = data["regularizers"]["variants"]
    assert set(regs) == {
        "baseline",
        "jasmin_k10_mean",
        "jasmin_k10_max",
        "jasmin_k0_mean",
        "specformer",
    }
    assert regs["baseline"]["ratio"] == 1.0
    assert all(r["ratio"] > 0 and r["syncs_per_step"] is None for r in regs.values())
    assert all(r["syncs_per_epoch_fixed"] is None for r in regs.values())

    ckpt = data["checkpoint"]
    assert ckpt["eval_clean"]["fp32_s_per_10k"] > 0 and ckpt["eval_clean"]["bf16_s_per_10k"] > 0
    assert ckpt["save"]["save_s"] > 0 and ckpt["save"]["bytes"] > 0

    att = data["attacks"]
    for name in ("pgd4", "fgsm"):
        for mode in ("fp32", "tf32", "bf16"):
            assert att[name][f"{mode}_images_per_s"] > 0, (name, mode)
        assert {"acc_diff_bf16_minus_fp32", "acc_diff_tf32_minus_fp32"} <= set(att[name])
    for stage in ("apgd-ce", "apgd-t", "fab-t", "square"):
        assert att["autoattack"][stage]["seconds"] > 0, stage
        # labelled with the model's own predictions: every image attacked at any accuracy
        assert att["autoattack"][stage]["n_attacked"] == att["autoattack"]["images"], stage

    lip = data["lipschitz"]
    trained = lip["trained_vs_random"]
    for route in ("jacobian_lanczos_fp32", "tokens_default"):
        for label in ("trained", "random_init"):
            assert trained[f"{route}_{label}"]["mean_iterations"] >= 1, (route, label)
        assert trained[f"{route}_iterations_trained_over_random"] > 0, route
    assert lip["jacobian_c10"]["route"] == "exact" and lip["jacobian_c100"]["route"] == "lanczos"
    heads = lip["head_bounds"]
    for key in (
        "matvec_s",
        "ritz_eigh_and_rest_s",
        "bounds_svd_device_s",
        "bounds_svd_cpu_s",
        "ritz_eigh_16_cpu_ms",
        "measure_head_bounds_s",
    ):
        assert heads[key] >= 0, key
    parts = lip["parts"]
    assert parts["num_classes"] == 100 and parts["route"] == "lanczos"
    for name in ("jacobian", "tokens", "softmax", "heads"):
        assert parts[name]["s_per_image"] > 0, name
    assert lip["summary"]["seconds"] > 0 and lip["summary"]["parts_predicted_s"] > 0

    trial = data["trial"]
    assert trial["run_trial"]["config"]["device"] == "cpu"
    assert {"acc_clean", "acc_pgd_4", "acc_aa_2"} <= set(trial["run_trial"]["metrics"])
    proj = trial["projection"]
    assert proj["missing"] == [] and proj["hours"] > 0
    assert proj["space"] == "search_spaces/paper_cifar100.yaml"
    assert proj["assumptions"]["lip_images"] == 10_000 and proj["assumptions"]["checkpoints"] == 4
    assert set(proj["parts_s"]) == {
        "train_s",
        "epoch_eval_s",
        "checkpoints_s",
        "final_clean_s",
        "fgsm_s",
        "pgd_s",
        "aa_s",
        "lipschitz_s",
    }
    assert abs(sum(proj["parts_s"].values()) - proj["total_s"]) < 1.0
    assert 0 < proj["lipschitz_share"] < 1 and 0 <= proj["checkpoint_share"] < 1


def test_gpu_report_renders_full_and_partial_json(tmp_path: Path) -> None:
    """gpu_report.py turns the kept CPU quick JSON, and a run cut short, into the tables."""
    gpu_report = bench_module("gpu_report")
    data = json.loads((ROOT / "benchmarks" / "gpu_suite_cpu_quick.json").read_text())
    text = gpu_report.report(data)
    for heading in (
        "Train step",
        "Regularizers",
        "Per-epoch evaluation",
        "Attacks",
        "Lipschitz estimators",
        "Trial and projection",
    ):
        assert f"### {heading}" in text
    assert "| jasmin_k10_mean |" in text and "| bf16_compile (static graph) | 8 |" in text
    assert f"**{data['trial']['projection']['hours']:.3f} h**" in text
    partial = {
        "meta": {"gpu": "H100"},
        "errors": ["attacks: RuntimeError: boom"],
        "train": {"runs": {"bf16_b512": {"mode": "bf16", "batch": 512, "step_ms": 90.0}}},
        "attacks": {"autoattack": {"skipped": "pyautoattack is not importable"}},
    }
    text = gpu_report.report(partial)
    assert "| bf16 | 512 | 90.00 | - |" in text and "Device: **H100**" in text
    assert "AutoAttack: skipped" in text and "attacks: RuntimeError: boom" in text
    assert "Placement:" not in gpu_report.report(data)  # a CPU run has no verdict


def test_gpu_report_renders_the_kept_h100_run() -> None:
    """The kept H100 JSON (docs/benchmarks.md's GPU figures) still renders, device named, with
    both projections docs/benchmarks.md quotes and the placement verdict a GPU run gets."""
    gpu_report = bench_module("gpu_report")
    data = json.loads((ROOT / "benchmarks" / "gpu_suite_h100.json").read_text())
    text = gpu_report.report(data)
    assert "Device: **NVIDIA H100 80GB HBM3**" in text
    assert "**0.189 h**" in text and "**0.164 h** (slowest regularizer: 0.180 h" in text
    assert "Placement: the CPU is 2.63x faster" in text
    assert "| jasmin_k10_mean | 82.85 | 1.257 |" in text and "rc 0" in text
    assert "| c100 reference | 64 | 21.361 |" in text and "24.2 %" in text


def test_gpu_report_renders_the_kept_h200_run() -> None:
    """The kept H200 JSON (two calls merged) renders with the compiled figures docs quote."""
    gpu_report = bench_module("gpu_report")
    data = json.loads((ROOT / "benchmarks" / "gpu_suite_h200.json").read_text())
    text = gpu_report.report(data)
    assert "Device: **NVIDIA H200**" in text
    assert "| bf16_compile (static graph) | 512 | 45.77 | 11,186 | 11.69 | 46.9 % |" in text
    assert "| jasmin_k10_mean | 21.8 | 59.87 | 1.302 | 1.274 | 0 |" in text
    assert "**0.145 h** (slowest regularizer: 0.160 h" in text and "29.0 %" in text


@pytest.mark.parametrize(
    ("svd", "ritz", "words"),
    [
        ((0.9, 0.3), (2.0, 1.0), "the CPU is 2.23x faster"),  # (device s, CPU s)
        ((0.2, 0.4), (1.0, 2.0), "the device is 2.00x faster"),
    ],
)
def test_gpu_report_says_which_linalg_placement_to_keep(svd, ritz, words) -> None:
    gpu_report = bench_module("gpu_report")
    rows = {"bounds_svd_device_s": svd[0], "bounds_svd_cpu_s": svd[1]}
    rows |= {"lanczos_ritz_device_s": ritz[0], "lanczos_ritz_cpu_s": ritz[1]}
    text = gpu_report.report({"meta": {"gpu": "H100"}, "lipschitz": {"head_bounds": rows}})
    assert f"Placement: {words}" in text


def _suite_module():
    return bench_module("gpu_suite")


def test_smoke_trial_within_the_deadline_or_skipped_or_killed_with_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--deadline-s: the smoke trial is skipped when too little time is left, and killed at its
    share (the JSON keeps the error and the trial's output so far), so the suite always writes."""
    gs = _suite_module()
    import torch

    suite = gs.Suite(tmp_path / "s.json", torch.device("cpu"), gs.QUICK, quick=True)
    space = ROOT / "search_spaces" / "smoke.yaml"
    gs.smoke_trial(suite, space, timeout_s=gs.SMOKE_MIN_S - 1)
    assert (
        "under the 60 s a smoke trial needs"
        in suite.data["smoke_trial"]["lipsweep_train"]["skipped"]
    )
    monkeypatch.setattr(gs, "SMOKE_MIN_S", 0.0)
    gs.smoke_trial(suite, space, timeout_s=1.0)  # torch's import alone takes longer
    r = suite.data["smoke_trial"]["lipsweep_train"]
    assert r["error"].startswith("RuntimeError: lipsweep train killed after 1 s")
    assert 1.0 <= r["wall_s"] < 30 and "output_tail" in r and "rc" not in r
    assert suite.data["errors"] == [f"lipsweep_train: {r['error']}"]


def test_smoke_trial_output_is_echoed_as_it_runs_and_kept(capfd: pytest.CaptureFixture) -> None:
    """The smoke trial's log reaches the suite's stderr line by line (a long trial shows its
    epochs), stdout and stderr alike, and the whole output comes back for the JSON."""
    gs = _suite_module()
    code = "import sys; print('epoch 1', flush=True); sys.stderr.write('eval\\n'); sys.exit(3)"
    rc, out = gs._run_echoed([sys.executable, "-c", code], timeout_s=30)
    assert (rc, out) == (3, "epoch 1\neval\n")
    assert capfd.readouterr().err == "smoke trial | epoch 1\nsmoke trial | eval\n"


def test_guard_records_one_failure_and_the_suite_goes_on(tmp_path: Path) -> None:
    gs = _suite_module()
    import torch

    suite = gs.Suite(tmp_path / "s.json", torch.device("cpu"), gs.QUICK, quick=True)
    sec: dict = {}
    with suite.guard(sec, "broken") as r:
        r["partial"] = 1
        raise RuntimeError("boom\nsecond line")
    with suite.guard(sec, "fine") as r:
        r["value"] = 2
    assert sec["broken"]["error"] == "RuntimeError: boom" and sec["broken"]["partial"] == 1
    assert sec["fine"]["value"] == 2 and "error" not in sec["fine"]
    assert suite.data["errors"] == ["broken: RuntimeError: boom"]
    suite.sizes = gs.Sizes(**{**gs.QUICK.__dict__, "budget_s": -1.0})
    ran = []
    with suite.guard(sec, "optional", optional=True) as r:
        if "skipped" not in r:
            ran.append(1)
    assert not ran and "time budget" in sec["optional"]["skipped"]
    suite.write()
    assert json.loads((tmp_path / "s.json").read_text())["errors"] == suite.data["errors"]


MEASURED = {
    "train": {
        "runs": {
            "bf16_b512": {"step_ms": 100.0},
            "bf16_b64": {"step_ms": 20.0},
            "fp32_b512": {"step_ms": 300.0},
        }
    },
    "regularizers": {"variants": {"baseline": {"ratio": 1.0}, "j": {"ratio": 1.5}}},
    "checkpoint": {
        "eval_clean": {"fp32_s_per_10k": 2.0, "bf16_s_per_10k": 1.0},
        "save": {"save_s": 1.0},
    },
    "attacks": {  # a CUDA trial attacks in fp32 with TF32 matmuls
        "pgd4": {"fp32_images_per_s": 1.0, "tf32_images_per_s": 909.0},
        "fgsm": {"fp32_images_per_s": 1.0, "tf32_images_per_s": 1818.0},
        "autoattack": {st: {"s_per_1000": 10.0} for st in ("apgd-ce", "apgd-t", "fab-t", "square")},
    },
    "lipschitz": {
        "parts": {
            "jacobian": {"s_per_image": 0.01},
            "tokens": {"s_per_image": 0.01},
            "softmax": {"s_per_image": 0.001},
            "heads": {"s_per_image": 0.5},
        }
    },
}


def test_projection_reads_every_assumption_from_the_paper_space() -> None:
    """One paper_cifar100 trial, every count from the space, not from the config defaults
    (500 Lipschitz images, a checkpoint every epoch): the space says lip_images 0 (all
    10,000) and checkpoint_every 10."""
    gs = _suite_module()
    target = gs.load_target(ROOT / "search_spaces" / "paper_cifar100.yaml")
    proj = gs.project_trial(MEASURED, target, "cuda")
    parts, a = proj["parts_s"], proj["assumptions"]
    assert proj["space"] == "search_spaces/paper_cifar100.yaml" and proj["grid_trials"] == 31
    assert (a["train_images"], a["eval_images"], a["attack_images"]) == (50_000, 10_000, 10_000)
    assert (a["lip_images"], a["lip_softmax_images"], a["lip_head_images"]) == (10_000, 10_000, 16)
    assert parts["train_s"] == 388.0  # 40 x 97 x 0.1 s
    # per-epoch evaluation in bf16 autocast (precision auto on CUDA), the final pass in fp32
    assert parts["epoch_eval_s"] == 40.0 and parts["final_clean_s"] == 2.0
    assert parts["checkpoints_s"] == 4.0 and a["checkpoints"] == 4  # epochs 10, 20, 30, 40
    assert parts["pgd_s"] == 20.0 and parts["fgsm_s"] == 10.0  # 2 eps x 9090 images
    assert parts["aa_s"] == round(1e4 * 0.01 * (0.909 + 0.2685 + 2 * 0.0212), 1)
    # 10,000 images x (J_f + tokens + softmax rows) + 16 images x head bounds
    assert parts["lipschitz_s"] == 10_000 * 0.021 + 16 * 0.5
    total = 388 + 40 + 4 + 2 + 10 + 20 + 1e4 * 0.01 * (0.909 + 0.2685 + 2 * 0.0212) + 218
    assert proj["total_s"] == round(total, 1) and proj["missing"] == []
    assert proj["lipschitz_share"] == round(218 / total, 4)
    assert proj["checkpoint_share"] == round(4 / total, 4)
    # every 2 epochs (20 checkpoints) is the first cadence under 3 %: 20 / (total + 16) < 0.03
    assert proj["checkpoint_every_for_target"] == 2
    assert proj["hours_slowest_regularizer"] == round((total + 194.0) / 3600, 4)
    pre = proj["preemption"]
    assert pre["restore_points"] == [10, 20, 30] and pre["epochs_lost_max_in_training"] == 10
    assert pre["epochs_lost_in_final_evaluation"] == 10  # epoch 40 travels with the final report
    epoch_s = 9.7 + 1.0
    assert pre["lost_s_max_in_training"] == round(10 * epoch_s, 1)
    assert pre["lost_s_in_final_evaluation"] == round(10 * epoch_s + total - 388 - 40 - 4, 1)


def test_projection_follows_the_space_it_is_given(tmp_path: Path) -> None:
    """Batch, classes, baseline accuracies, attack settings, image counts and precision come
    from the projected space: the batch-64 recipe, CIFAR-10, a CPU trial, a quick-mode batch."""
    gs = _suite_module()
    recipe = gs.project_trial(
        MEASURED, gs.load_target(ROOT / "search_spaces" / "specformer_recipe_cifar100.yaml"), "cuda"
    )
    assert recipe["assumptions"]["steps_per_epoch"] == 781
    assert recipe["parts_s"]["train_s"] == round(40 * 781 * 0.02, 1)  # the b64 step, measured
    c10 = gs.project_trial(
        MEASURED, gs.load_target(ROOT / "search_spaces" / "paper_cifar10.yaml"), "cuda"
    )
    assert c10["assumptions"]["num_classes"] == 10
    assert c10["parts_s"]["pgd_s"] == round(2 * 1e4 * 0.9856 / 909, 1)  # Table 4 baseline
    cpu = gs.project_trial(
        MEASURED, gs.load_target(ROOT / "search_spaces" / "paper_cifar100.yaml"), "cpu"
    )  # precision auto: fp32 steps, fp32 per-epoch evaluation and attacks
    assert cpu["parts_s"]["train_s"] == 40 * 97 * 0.3 and cpu["parts_s"]["epoch_eval_s"] == 80
    assert cpu["parts_s"]["pgd_s"] == 18180.0
    fixed = {"dataset": "cifar100", "data_dir": "s3://b/c.npz", "num_classes": 100}
    fixed |= {"epochs": 3, "batch_size": 256, "eval_size": 2000, "attack_images": 500}
    fixed |= {"lip_images": 100, "lip_head_images": 0, "lip_softmax": False, "pgd_steps": 8}
    fixed |= {"pgd_eps": [4], "attacks": ["pgd", "autoattack"], "aa_attacks": ["apgd-ce"]}
    fixed |= {"aa_iters": 20, "checkpoint_every": 2}
    spec = {"name": "s", "fixed": fixed, "grid": [NONE]}
    space = space_file(tmp_path, spec, "s.yaml")
    quick = {**MEASURED, "train": {"runs": {"bf16_b16": {"step_ms": 10.0}}}}
    own = gs.project_trial(quick, gs.load_target(space), "cuda")
    p, a = own["parts_s"], own["assumptions"]
    assert a["train_step_key"] == "bf16_b16" and a["batch_scale"] == 16.0
    assert p["train_s"] == round(3 * 195 * 0.01 * 16, 1)
    assert p["epoch_eval_s"] == 3 * 2000 * 1e-4 and p["checkpoints_s"] == 2.0  # epochs 2, 3
    assert p["fgsm_s"] == 0.0 and p["pgd_s"] == round(500 * 0.909 * 2 / 909, 1)
    assert p["aa_s"] == round(500 * 0.909 * 0.01 * 2, 1)
    assert p["lipschitz_s"] == round(100 * 0.02 + 100 * 0.5, 1)  # heads on all 100 (0 = all)
    assert own["preemption"]["restore_points"] == [2]


def test_plan_runs_the_smoke_trial_first_then_mandatory_then_optional_compile_last() -> None:
    """With a lent GPU the order is the smoke trial, the phases the projection
    needs (each capped), then the optional ones with compile last; the smoke trial and the
    mandatory caps fit one 600 s device call (about 60 s of it for the imports)."""
    gs = _suite_module()
    plan = gs.plan_phases(list(gs.SECTIONS), ROOT / "search_spaces" / "gpu_smoke.yaml")
    names = [p.name for p in plan]
    assert names[0] == "smoke_trial" and names[-1] == "compile"
    kinds = [p.mandatory for p in plan]
    assert kinds == sorted(kinds, reverse=True) and kinds.count(True) == 7
    assert names[1:7] == [
        "train",
        "regularizers",
        "checkpoint",
        "attacks",
        "lipschitz",
        "projection",
    ]
    for sizes in (gs.FULL, gs.QUICK):
        assert set(sizes.caps) == set(names)
    assert sum(gs.FULL.caps[p.name] for p in plan if p.mandatory) <= 540 - gs.DEADLINE_MARGIN_S
    assert [p.name for p in gs.plan_phases(["trial"], None)] == ["projection", "run_trial"]


def _phase_suite(tmp_path: Path, **caps: float):
    gs = _suite_module()
    import torch

    sizes = gs.Sizes(**{**gs.QUICK.__dict__, "caps": caps})
    return gs, gs.Suite(tmp_path / "s.json", torch.device("cpu"), sizes, quick=True)


def test_a_phase_past_its_cap_is_stopped_and_the_next_one_runs(tmp_path: Path) -> None:
    """The cap is enforced (SIGALRM), not only checked between phases: a phase stuck past it
    is stopped, what it measured stays, and the suite goes on."""
    import time

    gs, suite = _phase_suite(tmp_path, stuck=0.3, next=5.0, extra=5.0)

    def stuck(s) -> None:
        s.data.setdefault("x", {})["before"] = 1
        with s.guard(s.data["x"], "inner"):  # a measurement guard does not swallow the cap
            time.sleep(10)
        s.data["x"]["after"] = 1

    def ok(s) -> None:
        s.data["x"][f"ran_{len(s.data['meta']['phases'])}"] = 1

    plan = [
        gs.Phase("stuck", "x", stuck, True),
        gs.Phase("next", "x", ok, True),
        gs.Phase("extra", "x", ok, False),
    ]
    t0 = time.monotonic()
    gs.run_phases(suite, plan)
    assert time.monotonic() - t0 < 5
    done = [(p["name"], p["status"]) for p in suite.data["meta"]["phases"]]
    assert done == [("stuck", "capped"), ("next", "done"), ("extra", "done")]
    assert suite.data["x"]["before"] == 1 and "after" not in suite.data["x"]
    assert suite.data["x"]["ran_2"] == suite.data["x"]["ran_3"] == 1
    assert suite.data["meta"]["phases"][0]["seconds"] < 2
    assert json.loads((tmp_path / "s.json").read_text())["meta"]["phases"][0]["status"] == "capped"


def test_optional_phases_give_way_to_the_budget_and_the_deadline(tmp_path: Path) -> None:
    gs, suite = _phase_suite(tmp_path, must=10.0, nice=10.0)
    plan = [
        gs.Phase("must", "x", lambda s: None, True),
        gs.Phase("nice", "x", lambda s: None, False),
    ]
    # 22 s before the deadline: the mandatory phase runs with its cap cut to what is left
    # (minus the 15 s margin), the optional one, whose 10 s cap does not fit, is skipped
    gs.run_phases(suite, plan, deadline_s=suite.elapsed() + 22.0)
    must, nice = suite.data["meta"]["phases"]
    assert must["status"] == "done" and 5.0 <= must["cap_s"] <= 7.0
    assert nice["status"] == "skipped" and "does not fit" in nice["reason"]
    suite.sizes = gs.Sizes(**{**suite.sizes.__dict__, "budget_s": -1.0})
    suite.data["meta"]["phases"] = []
    gs.run_phases(suite, plan)
    assert [p["status"] for p in suite.data["meta"]["phases"]] == ["done", "skipped"]


def test_sync_split_charges_the_epoch_end_check_to_the_epoch(monkeypatch) -> None:
    """syncs_per_step = (s(4) - s(2)) / 2: the epoch-end check is not a per-step sync."""
    gs = _suite_module()
    import torch

    # a loop with 1 sync per epoch (the check) and 0 per step, then 3 per step
    for per_step in (0, 3):
        sites = lambda fn, dev, k=per_step: ["check"] + ["step"] * (k * fn())  # noqa: E731
        monkeypatch.setattr(gs, "sync_sites", sites)
        split = gs.syncs_per_step(lambda n: n, torch.device("cuda"))
        assert split["syncs_per_step"] == per_step and split["syncs_per_epoch_fixed"] == 1
        assert split["sync_sites"] == (
            {"check": 2, "step": 6 * per_step} if per_step else {"check": 2}
        )


def test_train_loop_refuses_a_generator_off_the_training_device() -> None:
    """A host generator on a CUDA run would add a host-to-device copy (a sync) per draw: the
    engine refuses it before the first step (the suite once passed one)."""
    import torch

    from lipsweep.trial.engine import train_one_epoch

    with pytest.raises(ValueError, match="gen is on cpu but training runs on meta"):
        train_one_epoch(
            None,
            None,
            None,
            [],
            optim_cfg=None,
            data_cfg=None,
            device=torch.device("meta"),
            precision="fp32",
            gen=torch.Generator(),
            mixup=None,
            step0=0,
            steps_per_epoch=1,
            epoch=1,
        )


def test_precision_switches_leave_torch_consistent() -> None:
    """The suite's train modes and lipsweep's attack TF32 scope use one API: torch >= 2.9
    raises in get_float32_matmul_precision (which torch.compile's cache key reads) after
    set_float32_matmul_precision is mixed with the per-backend allow_tf32 flags."""
    gs = _suite_module()
    import torch

    from lipsweep.vit.precision import tf32_matmuls

    before = torch.get_float32_matmul_precision()
    for mode in ("fp32", "tf32", "bf16"):
        with gs.matmul_mode(mode):
            for enabled in (True, False):
                with tf32_matmuls(enabled):
                    torch.get_float32_matmul_precision()
            assert torch.backends.cuda.matmul.allow_tf32 is (mode == "tf32")
            torch.get_float32_matmul_precision()
    assert torch.get_float32_matmul_precision() == before


def test_gpu_report_shows_the_smoke_trial() -> None:
    gpu_report = bench_module("gpu_report")
    cfg = {"model": "vit_base_patch16_224", "regularizer": "none", "device": "cuda"}
    ok = {
        "space": "search_spaces/gpu_smoke.yaml",
        "config": {**cfg, "train_size": 2048, "epochs": 1, "eval_size": 256},
        "offline_overrides": {"pretrained": ""},
        "rc": 0,
        "wall_s": 95.25,
        "metrics": {"acc_clean": 12.5, "acc_pgd_4": 3.0},
    }
    text = gpu_report.report({"meta": {"gpu": "H100"}, "smoke_trial": {"lipsweep_train": ok}})
    assert "### Smoke trial" in text and "`gpu_smoke.yaml` trial" in text
    assert "rc 0, 95.2 s wall; acc_clean 12.50, acc_pgd_4 3.00." in text
    failed = {**ok, "error": "RuntimeError: lipsweep train killed after 120 s"}
    text = gpu_report.report({"smoke_trial": {"lipsweep_train": failed}})
    assert "**failed** after 95.2 s: RuntimeError: lipsweep train killed after 120 s." in text
    skipped = {"lipsweep_train": {"skipped": "40 s left before --deadline-s"}}
    assert "skipped (40 s left" in gpu_report.report({"smoke_trial": skipped})
    assert "Smoke trial" not in gpu_report.report({})


def test_a_bad_space_exits_2_with_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    gs = _suite_module()
    space = space_file(tmp_path, {"name": "s", "fixed": {"epochs": -1}, "grid": [NONE]}, "bad.yaml")
    out = tmp_path / "s.json"
    argv = ["--device", "cpu", "--quick", "--out", str(out), "--space", str(space)]
    assert gs.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--space" in err[0] and "epochs: must be > 0" in err[0]
    assert not out.exists()


def test_merge_folds_a_second_calls_compiled_phases_as_one_call_would_have(
    tmp_path: Path,
) -> None:
    """The kept H100 run measured every phase in one call, the suite's own speed-ups and MFUs
    included: split its compiled phases off into a second call's JSON (without those derived
    figures), merge them back, and the merged JSON gives the suite's figures and projection."""
    merge = bench_module("merge_lipschitz_batch")
    whole = json.loads((ROOT / "benchmarks" / "gpu_suite_h100.json").read_text())
    compiled_names = ("regularizers_compiled", "compile")
    first = json.loads(json.dumps(whole))
    del first["regularizers"]["compiled"]
    first["train"]["runs"] = {k: v for k, v in first["train"]["runs"].items() if "compile" not in k}
    first["meta"]["phases"] = [
        p for p in first["meta"]["phases"] if p["name"] not in compiled_names
    ]
    second = {
        "meta": {
            **whole["meta"],
            "phases": [p for p in whole["meta"]["phases"] if p["name"] in compiled_names],
        },
        "errors": [],
        "regularizers": {"compiled": json.loads(json.dumps(whole["regularizers"]["compiled"]))},
        "train": {
            "compile_backend": whole["train"]["compile_backend"],
            "runs": {
                k: {**v, "mfu_vs_bf16_matmul": None}
                for k, v in whole["train"]["runs"].items()
                if "compile" in k
            },
        },
    }
    for r in second["regularizers"]["compiled"].values():
        if isinstance(r, dict):
            r.pop("speedup_vs_eager")
    merged = merge.merge_compiled(first, second)
    regs = {k: r for k, r in whole["regularizers"]["compiled"].items() if isinstance(r, dict)}
    assert len(regs) == 5
    for name, r in regs.items():
        assert merged["regularizers"]["compiled"][name]["speedup_vs_eager"] == pytest.approx(
            r["speedup_vs_eager"], abs=1e-4
        )
    for key in ("bf16_compile_b512", "bf16_compile_b64"):
        assert merged["train"]["runs"][key]["mfu_vs_bf16_matmul"] == pytest.approx(
            whole["train"]["runs"][key]["mfu_vs_bf16_matmul"], abs=1e-4
        )
    assert [p["name"] for p in merged["meta"]["phases"]][-2:] == list(compiled_names)
    assert merged["trial"]["projection_eager"] == first["trial"]["projection"]
    assert merged["trial"]["projection"]["hours"] == merge._project(whole)["hours"]
    assert merged["trial"]["projection"]["hours"] != first["trial"]["projection"]["hours"]
    other = {**second, "meta": {**second["meta"], "gpu": "NVIDIA H200"}}
    (tmp_path / "a.json").write_text(json.dumps(first))
    (tmp_path / "c.json").write_text(json.dumps(other))
    batch = ROOT / "benchmarks" / "lipschitz_batch_h100.json"
    args = [str(tmp_path / "a.json"), str(batch), "--compiled", str(tmp_path / "c.json")]
    assert merge.main([*args, "--out", str(tmp_path / "m.json")]) == 2
