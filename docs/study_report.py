"""Build docs/study.md's numbers and figures from a finished sweep's MLflow runs (nothing by hand).

Reads the FINISHED child runs of ``--experiment``, groups them into arms (every setting except
the seed), and writes:

* the Table-3-shaped table (mean +- sample std over seeds) and the paired differences to the
  baseline (same seed = same initialisation, batch order and augmentation), spliced into
  ``--doc`` between ``<!-- study-table:begin -->`` and ``<!-- study-table:end -->``;
* ``<figures>/lipschitz_by_arm.png``: the per-image ||J_f(x)||_2 of every arm (pooled over
  seeds) from each run's ``lipschitz/lipschitz.npz`` artifact;
* ``<figures>/pareto_scatter.png`` and ``pareto_parallel.png``: the parent run's artifacts logged
  by ``lipsweep pareto``, and one ``lipschitz_jacobian_hist.png`` per arm (seed 0).

    python docs/study_report.py --experiment study_cifar10_sample --tracking-uri sqlite:///study.db
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

METRICS = [("acc_clean_eval", "Clean (all eval)"), ("acc_clean", "Clean"), ("acc_fgsm_2", "FGSM 2"), ("acc_fgsm_4", "FGSM 4"),
           ("acc_pgd_2", "PGD 2"), ("acc_pgd_4", "PGD 4"), ("acc_aa_2", "AA 2"),
           ("lip_jacobian_median", "median ‖J_f‖"), ("lip_jacobian_p90", "p90 ‖J_f‖")]
BEGIN, END = "<!-- study-table:begin -->", "<!-- study-table:end -->"


def arm_label(p: dict[str, str]) -> str:
    reg = p.get("regularizer", "none")
    if reg == "jasmin":
        return f"JaSMin k={p['k']} λ={float(p['lam']):g} {p['aggregation']}"
    if reg == "specformer":
        return f"Specformer ({float(p['lam_q']):g}, {float(p['lam_k']):g}, {float(p['lam_v']):g})"
    return "Baseline"


def load_runs(tracking_uri: str, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise SystemExit(f"error: no experiment {experiment!r} in {tracking_uri}")
    runs = client.search_runs([exp.experiment_id], "tags.`lipsweep.kind` = 'trial'",
                              max_results=10000)
    parent = client.search_runs([exp.experiment_id], "tags.`lipsweep.kind` = 'sweep'")
    done = [r for r in runs if r.info.status == "FINISHED"]
    for r in done:
        # The final evaluation logs acc_clean at step 0 on the attacked images (like the robust
        # metrics); the held-out accuracy after each epoch (all eval_size images) is
        # epoch_acc_clean. Runs logged before that name existed hold both under acc_clean.
        hist = client.get_metric_history(r.info.run_id, "acc_clean")
        per_epoch = (client.get_metric_history(r.info.run_id, "epoch_acc_clean")
                     or [m for m in hist if m.step > 0])
        r.data.metrics["acc_clean_eval"] = max(per_epoch, key=lambda m: m.step).value
        r.data.metrics["acc_clean"] = next(m.value for m in hist if m.step == 0)
    return client, done, (parent[0] if parent else None), len(runs)


def fmt(values: list[float], digits: int) -> str:
    a = np.asarray(values, float)
    sd = a.std(ddof=1) if len(a) > 1 else 0.0
    return f"{a.mean():.{digits}f} ± {sd:.{digits}f}"


def arm_order(arms: dict[str, list]) -> list[str]:
    """Baseline first, then Specformer, then the JaSMin arms by name (the paper's row order)."""
    return sorted(arms, key=lambda a: (a != "Baseline", not a.startswith("Spec"), a))


def tables(arms: dict[str, list]) -> str:
    order = arm_order(arms)
    seeds = sorted({int(r.data.params["seed"]) for runs in arms.values() for r in runs})
    lines = ["| arm | seeds | " + " | ".join(h for _, h in METRICS) + " |",
             "|---|---:|" + "---:|" * len(METRICS)]
    for arm in order:
        runs = arms[arm]
        cells = [fmt([r.data.metrics[m] for r in runs], 3 if m.startswith("lip") else 2)
                 for m, _ in METRICS]
        lines.append(f"| {arm} | {len(runs)} | " + " | ".join(cells) + " |")
    lines += ["", "Paired differences to the baseline (arm minus baseline, same seed; mean ± "
              "std over seeds, and in how many seeds the difference has the paper's sign: "
              "clean accuracy down, PGD-4 up, median ‖J_f‖ down):", "",
              "| arm | Δ clean | Δ PGD 4 | Δ AA 2 | Δ median ‖J_f‖ (relative) | seeds with the paper's sign (clean↓ / PGD4↑ / ‖J‖↓) |",
              "|---|---:|---:|---:|---:|---|"]
    base = {int(r.data.params["seed"]): r.data.metrics for r in arms.get("Baseline", [])}
    for arm in order:
        if arm == "Baseline" or not base:
            continue
        own = {int(r.data.params["seed"]): r.data.metrics for r in arms[arm]}
        common = [s for s in seeds if s in own and s in base]
        d = {m: [own[s][m] - base[s][m] for s in common]
             for m in ("acc_clean", "acc_pgd_4", "acc_aa_2")}
        rel = [own[s]["lip_jacobian_median"] / base[s]["lip_jacobian_median"] - 1
               for s in common]
        signs = (sum(x < 0 for x in d["acc_clean"]), sum(x > 0 for x in d["acc_pgd_4"]),
                 sum(x < 0 for x in rel))
        lines.append(f"| {arm} | {fmt(d['acc_clean'], 2)} | {fmt(d['acc_pgd_4'], 2)} | "
                     f"{fmt(d['acc_aa_2'], 2)} | {fmt([100 * x for x in rel], 1)} % | "
                     f"{signs[0]}/{len(common)} · {signs[1]}/{len(common)} · "
                     f"{signs[2]}/{len(common)} |")
    return "\n".join(lines)


def lipschitz_figure(client, arms: dict[str, list], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    order = arm_order(arms)
    with tempfile.TemporaryDirectory() as tmp:
        data = {}
        for arm in order:
            vals = []
            for r in arms[arm]:
                p = client.download_artifacts(r.info.run_id, "lipschitz/lipschitz.npz", tmp)
                with np.load(p, allow_pickle=False) as z:
                    vals.append(z["jacobian_norm"])
            data[arm] = np.concatenate(vals)
    lo = min(v.min() for v in data.values())
    hi = max(np.percentile(v, 99.5) for v in data.values())
    bins = np.linspace(lo, hi, 60)
    for arm in order:
        v = data[arm]
        ax.hist(v, bins=bins, histtype="step", linewidth=1.6 if arm == "Baseline" else 1.1,
                label=f"{arm} (median {np.median(v):.2f})")
    ax.set_xlabel("‖J_f(x)‖₂ per evaluation image (logits w.r.t. [0,1] pixels)")
    ax.set_ylabel("images (pooled over seeds)")
    ax.set_title("Local Lipschitz constants by arm")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiment", default="study_cifar10_sample")
    ap.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI",
                                                             "sqlite:///study.db"))
    ap.add_argument("--doc", type=Path, default=Path(__file__).with_name("study.md"))
    ap.add_argument("--figures", type=Path, default=Path(__file__).with_name("study"))
    args = ap.parse_args()
    client, runs, parent, total = load_runs(args.tracking_uri, args.experiment)
    arms: dict[str, list] = defaultdict(list)
    for r in runs:
        arms[arm_label(r.data.params)].append(r)
    args.figures.mkdir(parents=True, exist_ok=True)
    block = (f"{BEGIN}\n_{len(runs)} FINISHED trials of {total} in experiment "
             f"`{args.experiment}`; generated by `docs/study_report.py`._\n\n"
             + tables(arms) + f"\n{END}")
    text = args.doc.read_text() if args.doc.exists() else f"{BEGIN}\n{END}\n"
    text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    args.doc.write_text(text)
    lipschitz_figure(client, arms, args.figures / "lipschitz_by_arm.png")
    with tempfile.TemporaryDirectory() as tmp:
        if parent is not None:
            for name in ("pareto_scatter.png", "pareto_parallel.png"):
                try:
                    p = client.download_artifacts(parent.info.run_id, f"pareto/{name}", tmp)
                    shutil.copy(p, args.figures / name)
                except Exception as exc:  # noqa: BLE001 - pareto not run yet
                    print(f"warning: parent artifact pareto/{name}: {exc}")
        for arm, rs in arms.items():
            r = min(rs, key=lambda r: int(r.data.params["seed"]))
            p = client.download_artifacts(r.info.run_id, "lipschitz/lipschitz_jacobian_hist.png",
                                          tmp)
            slug = re.sub(r"[^a-z0-9]+", "_", arm.lower()).strip("_")
            shutil.copy(p, args.figures / f"jacobian_hist_{slug}.png")
    print(block)


if __name__ == "__main__":
    main()
