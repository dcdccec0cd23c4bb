"""The real sweep on one GPU: `lipsweep sweep` through Ray Tune and MLflow, then `pareto` and
`export`, and the same space at several ``resources.gpu`` fractions for the packing figure.

    python benchmarks/gpu_sweep.py [--fractions 0.5,1.0] [--deadline-s 420] [--out FILE.json]
    python benchmarks/gpu_sweep.py --cpu-smoke --out /tmp/gpu_sweep_cpu.json

The space: ViT-B with the paper's recipe (``search_spaces/paper_cifar10.yaml``'s optimizer,
augmentation and attacks) from random init (the GPU machine has no network) on the CIFAR-10
sample in the package at 32 px, one epoch on 2048 images, the evaluation on 256 (attacks on
128, Lipschitz on 64), four trials (baseline, JaSMin k=0 mean and k=10 max, Specformer), a local
Ray and MLflow on SQLite in ``--work``. The first fraction's sweep is the main one: ``pareto``
and ``export`` run on it, and the export's logits are compared with those of the network built
from the run's own MLflow checkpoint. Each further fraction runs the space's first
``--packing-trials`` grid points again while the deadline leaves room; ``packing`` gives each
fraction's trials per hour per GPU over the command's wall time and over the trials' own span
(``trials_per_hour_steady``, without Ray's and MLflow's start-up, which a real grid pays
once). ``--cpu-smoke`` runs the same steps with a tiny ViT, ``gpu: 0`` and tiny sizes on the
CPU. The JSON (rewritten after each step) holds ``meta``, ``sweep``, ``packing``,
``pareto`` and ``export``; docs/benchmarks.md ("A sweep on the GPU") describes it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's lipsweep
from lipsweep.sweep.projection import RAY_TYPES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
_log = logging.getLogger("gpu_sweep")

PAPER = ROOT / "search_spaces" / "paper_cifar10.yaml"
RECIPE_KEYS = (
    "optimizer lr min_lr warmup_epochs momentum weight_decay weight_decay_scope clip_grad mixup "
    "cutmix mix_prob label_smoothing crop_padding hflip pgd_steps pgd_step_size "
    "pgd_random_start fgsm_eps pgd_eps aa_eps aa_iters normalization patch_resample"
).split()
GRID = [
    {"regularizer": "none"},
    {"regularizer": "jasmin", "k": 0, "lam": 1.0e-2, "aggregation": "mean"},
    {"regularizer": "jasmin", "k": 10, "lam": 1.0e-2, "aggregation": "max"},
    {"regularizer": "specformer", "lam_q,lam_k,lam_v": [[1.0e-2, 1.0e-2, 1.0e-2]]},
]
GPU_SIZES = {
    "model": "vit_base_patch16_224",
    "pretrained": "",
    "img_size": 32,
    "patch_size": 4,
    "qkv_bias": False,
    "device": "cuda",
    "train_size": 2048,
    "eval_size": 256,
    "attack_images": 128,
    "lip_images": 64,
    "batch_size": 256,
    "epochs": 1,
}
CPU_SIZES = {
    "model": "vit_tiny_patch16_224",
    "pretrained": "",
    "depth": 2,
    "embed_dim": 64,
    "num_heads": 2,
    "img_size": 32,
    "patch_size": 4,
    "device": "cpu",
    "train_size": 64,
    "eval_size": 16,
    "attack_images": 8,
    "lip_images": 4,
    "batch_size": 32,
    "epochs": 1,
    "aa_iters": 2,
}


def space(fraction: float, cpu_smoke: bool, trials: int = len(GRID)) -> dict[str, Any]:
    """The sweep's space at ``resources.gpu`` = ``fraction``, with the first ``trials`` grid
    points."""
    paper = yaml.safe_load(PAPER.read_text())["fixed"]
    fixed = {k: paper[k] for k in RECIPE_KEYS if k in paper}
    fixed.update(
        num_classes=10,
        dataset="embedded",
        aa_attacks=["apgd-ce", "apgd-t"],
        seed=0,
    )
    fixed.update(CPU_SIZES if cpu_smoke else GPU_SIZES)
    if cpu_smoke:
        fixed.pop("normalization", None)  # the tiny ViT keeps its own
    name = f"gpu_sweep_g{int(round(fraction * 100)):03d}"
    return {
        "name": name,
        "description": f"ViT on the CIFAR-10 sample, resources.gpu {fraction}",
        "fixed": fixed,
        "grid": GRID[:trials],
        "resources": {"cpu": 1 if cpu_smoke else 4, "gpu": 0 if cpu_smoke else fraction},
        # on the CPU the fraction becomes a cap: 1 / fraction trials at once, as on one GPU
        "max_concurrent_trials": max(1, round(1 / fraction)) if cpu_smoke else 0,
        "max_failures": 0,
    }


class GpuSampler:
    """Samples ``nvidia-smi``'s compute processes every second: the most processes on the GPU at
    once and the largest memory one of them held (GiB); both None without nvidia-smi."""

    def __init__(self) -> None:
        self.max_procs: Optional[int] = None
        self.peak_gib: Optional[float] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.available = shutil.which("nvidia-smi") is not None

    def __enter__(self) -> "GpuSampler":
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        query = ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"]
        while not self._stop.wait(1.0):
            try:
                out = subprocess.run(query, capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.TimeoutExpired):
                continue
            mib = [float(line.split(",")[1].split()[0]) for line in out.splitlines() if "," in line]
            self.max_procs = max(self.max_procs or 0, len(mib))
            if mib:
                self.peak_gib = max(self.peak_gib or 0.0, round(max(mib) / 1024, 3))


def overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals (start, end) open at one time."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    most = now = 0
    for _, step in events:  # an end at the same time as a start closes first
        now += step
        most = max(most, now)
    return most


def tune_spans(storage: Path, experiment: str) -> list[tuple[float, float]]:
    """Each trial's (start, end) as Tune recorded it (``result.json``: the first report's
    timestamp less its iteration time, the last report's timestamp)."""
    spans = []
    for result in sorted((storage / experiment).glob("*/result.json")):
        rows = [json.loads(line) for line in result.read_text().splitlines() if line.strip()]
        if rows:
            first, last = rows[0], rows[-1]
            spans.append((first["timestamp"] - first["time_this_iter_s"], last["timestamp"]))
    return spans


def required_metrics(flat: dict[str, Any]) -> list[str]:
    """Every final metric a finished trial of this config logs to MLflow."""
    from lipsweep.core.metric_names import LIP_JACOBIAN, LIP_STATS
    from lipsweep.settings.config import TrialConfig

    cfg = TrialConfig.from_flat(flat)
    return cfg.robustness.metric_names() + [f"{LIP_JACOBIAN}_{s}" for s in LIP_STATS]


def child_runs(uri: str, experiment: str) -> list[Any]:
    """The sweep's trial runs (MLflow child runs) of ``experiment``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000) if exp else []
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def run_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> dict[str, Any]:
    """One `python -m lipsweep ...` command: rc, wall time and the output's last lines. Past
    ``timeout`` it gets SIGINT (a sweep then stops its trials and its Ray), then SIGKILL."""
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "lipsweep", *args]
    _log.info("$ %s", " ".join(cmd[1:]))
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc: Optional[int] = proc.wait(timeout=max(timeout, 1))
            killed = ""
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc, killed = None, f"stopped after {timeout:.0f} s (the deadline)\n"
        log.seek(0)
        tail = killed + log.read()[-1500:]
    if rc != 0:
        _log.warning("rc %s:\n%s", rc, tail)
    return {"rc": rc, "wall_s": round(time.monotonic() - t0, 1), "output_tail": tail}


def sweep_once(
    fraction: float,
    cpu_smoke: bool,
    work: Path,
    env: dict[str, str],
    timeout: float,
    cpus: int,
    trials: int = len(GRID),
) -> tuple[dict[str, Any], str]:
    """Run the space at ``fraction`` through `lipsweep sweep`; its figures and experiment."""
    sp = space(fraction, cpu_smoke, trials)
    path = work / f"{sp['name']}.yaml"
    path.write_text(yaml.safe_dump(sp, sort_keys=False))
    uri = env["MLFLOW_TRACKING_URI"]
    with GpuSampler() as gpu:
        cli = run_cli(
            ["sweep", str(path), "--storage", str(work / "ray_results"), "--num-cpus", str(cpus)]
            + ["--status-every", "0"],
            env,
            work,
            timeout,
        )
    runs = child_runs(uri, sp["name"])
    finished = [r for r in runs if r.info.status == "FINISHED"]
    spans = tune_spans(work / "ray_results", sp["name"])
    need = required_metrics({**sp["fixed"], **GRID[0]})
    complete = [r for r in finished if all(m in r.data.metrics for m in need)]
    trial_s = sorted(e - s for s, e in spans)
    span = max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0.0
    res = {
        "resources_gpu": sp["resources"]["gpu"],
        "trials": trials,
        "finished": len(finished),
        "failed": trials - len(finished),
        "max_concurrent_trials": overlap(spans) if spans else 0,  # Tune's own trial times
        "gpu_processes_max": gpu.max_procs,
        "runs_with_all_metrics": len(complete),
        "required_metrics": need,
        "wall_s": cli["wall_s"],
        "trial_s_median": round(trial_s[len(trial_s) // 2], 1) if trial_s else None,
        "gpu_mem_peak_gib_per_trial": gpu.peak_gib,
        "trials_per_hour": round(len(finished) / cli["wall_s"] * 3600, 1)
        if cli["wall_s"]
        else None,
        "trials_span_s": round(span, 1),
        "trials_per_hour_steady": round(len(finished) / span * 3600, 1) if span else None,
        "startup_s": round(cli["wall_s"] - span, 1),
        "rc": cli["rc"],
    }
    if cli["rc"] != 0:
        res["output_tail"] = cli["output_tail"]
    _log.info("gpu %s: %s", fraction, {k: v for k, v in res.items() if k != "required_metrics"})
    return res, sp["name"]


def export_check(work: Path, uri: str, experiment: str, cpu_smoke: bool) -> dict[str, Any]:
    """The export's logits against the network built from its run's MLflow checkpoint, on the
    run's first evaluation images, both on the device the sweep trained on."""
    import torch

    from lipsweep.decide.confirm import build_model, load_images
    from lipsweep.decide.sweep_runs import download_checkpoint, read_tracker
    from lipsweep.vit.export_format import load_exported

    folder = work / "export"
    config = json.loads((folder / "config.json").read_text())
    run_id = config["source"]["run_id"]
    flat, weights = download_checkpoint(read_tracker(uri, experiment), run_id)
    dev = torch.device("cpu" if cpu_smoke else "cuda")
    x, _ = load_images(flat, 64)
    with torch.no_grad():
        ref = build_model(flat, weights).to(dev)(x.to(dev)).float().cpu()
        got = load_exported(folder).to(dev).eval()(x.to(dev)).float().cpu()
    return {
        "run_id": run_id,
        "images": int(x.shape[0]),
        "logits_max_abs_diff": float((ref - got).abs().max()),
        "argmax_agree": float((ref.argmax(1) == got.argmax(1)).float().mean()),
    }


def front_size(uri: str, experiment: str) -> Optional[int]:
    """Trial runs of ``experiment`` that `lipsweep pareto` tagged ``pareto=true``."""
    return sum(r.data.tags.get("pareto") == "true" for r in child_runs(uri, experiment))


def meta(cpu_smoke: bool) -> dict[str, Any]:
    """Where and when: GPU name, start, device description and the checkout's commit."""
    gpu = None
    if shutil.which("nvidia-smi"):
        q = ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"]
        gpu = subprocess.run(q, capture_output=True, text=True).stdout.strip() or None
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return {
        "gpu": None if cpu_smoke else (gpu.split(",")[0] if gpu else None),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": gpu or f"CPU ({os.cpu_count()} cores)",
        "commit": commit or os.environ.get("LIPSWEEP_COMMIT"),
        "cpu_smoke": cpu_smoke,
        "python": sys.version.split()[0],
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fractions", default="0.5,1.0", help="resources.gpu values, main one first")
    p.add_argument("--deadline-s", type=float, default=420.0, help="stop starting steps after")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny ViT, gpu 0, on the CPU")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray")
    p.add_argument(
        "--packing-trials",
        type=int,
        default=2,
        help="grid points of each further fraction's sweep (its steady rate is comparable)",
    )
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp)")
    p.add_argument("--out", type=Path, default=None, help="default benchmarks/gpu_sweep_<gpu>")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        fractions = [float(f) for f in args.fractions.split(",")]
        if not fractions or any(not 0 < f <= 1 for f in fractions):
            raise ValueError
    except ValueError:
        print(
            f"gpu_sweep.py: error: --fractions: {args.fractions!r} is not in (0, 1]",
            file=sys.stderr,
        )
        return 2
    t0 = time.monotonic()
    data: dict[str, Any] = {"meta": meta(args.cpu_smoke), "errors": []}
    gpu = data["meta"]["gpu"] or "gpu"
    tag = "cpu" if args.cpu_smoke else RAY_TYPES.get(gpu, gpu.split()[-1]).lower()
    out = args.out or ROOT / "benchmarks" / f"gpu_sweep_{tag}.json"
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu_sweep_"))
    work.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    env = dict(
        os.environ,
        MLFLOW_TRACKING_URI=uri,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
        MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false",
    )
    cpus = args.num_cpus or (2 if args.cpu_smoke else os.cpu_count() or 1)

    def left() -> float:
        return args.deadline_s - (time.monotonic() - t0)

    def write() -> None:
        data["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
        out.write_text(json.dumps(data, indent=1) + "\n")

    data["packing"] = {}
    main_res, experiment = sweep_once(fractions[0], args.cpu_smoke, work, env, left() - 10, cpus)
    data["sweep"] = main_res
    data["packing"][str(fractions[0])] = _packing(main_res)
    write()
    if main_res["finished"]:
        pareto = run_cli(["pareto", "--experiment", experiment], env, work, left())
        data["pareto"] = {"rc": pareto["rc"], "wall_s": pareto["wall_s"]}
        if pareto["rc"] == 0:
            data["pareto"]["front_size"] = front_size(uri, experiment)
        export = run_cli(
            ["export", "--experiment", experiment, "--out", str(work / "export")],
            env,
            work,
            left(),
        )
        data["export"] = {"rc": export["rc"], "wall_s": export["wall_s"]}
        if export["rc"] == 0:
            try:
                data["export"].update(export_check(work, uri, experiment, args.cpu_smoke))
            except Exception as exc:  # noqa: BLE001 - recorded; the packing runs go on
                data["errors"].append(f"export check: {type(exc).__name__}: {exc}")
        write()
    for fraction in fractions[1:]:
        at_once = max(1, int(1 / fraction + 1e-9))
        trial_s = main_res["trial_s_median"] or 0.0
        need = main_res["startup_s"] + 1.2 * args.packing_trials * trial_s / at_once + 10
        if not main_res["finished"]:
            data["packing"][str(fraction)] = {"skipped": "the main sweep finished no trial"}
        elif left() < need:
            data["packing"][str(fraction)] = {
                "skipped": f"{left():.0f} s left, about {need:.0f} s needed"
            }
        else:
            res, _ = sweep_once(
                fraction, args.cpu_smoke, work, env, left() - 10, cpus, args.packing_trials
            )
            data["packing"][str(fraction)] = _packing(res)
        write()
    data["meta"]["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write()
    _log.info("wrote %s (work folder %s)", out, work)
    return 0 if main_res["finished"] == main_res["trials"] else 1


def _packing(res: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "resources_gpu trials finished wall_s startup_s trials_span_s trials_per_hour "
        "trials_per_hour_steady trial_s_median max_concurrent_trials gpu_processes_max "
        "gpu_mem_peak_gib_per_trial"
    ).split()
    return {k: res.get(k) for k in keys}


if __name__ == "__main__":
    sys.exit(main())
