"""Turn a benchmarks/gpu_suite.py JSON file into the markdown tables of docs/benchmarks.md.

    python benchmarks/gpu_report.py gpu_suite.json > tables.md

Missing or failed measurements print as "-" (errors and skips are listed under the tables), so
a partial run still gives every table.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def fmt(v: Any, digits: int = 2) -> str:
    """A cell: '-' for missing, fixed digits for floats, plain text otherwise."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def pct(v: Optional[float]) -> str:
    return "-" if v is None else f"{100 * v:.1f} %"


def table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def device_line(meta: dict[str, Any]) -> str:
    dev = (
        meta.get("gpu")
        or f"CPU ({meta.get('cpu_count')} cores, {meta.get('torch_threads')} torch thread(s))"
    )
    extra = f", CUDA {meta['cuda']}" if meta.get("cuda") else ""
    load = meta.get("loadavg_start")
    load_s = f", load average at start {load[0]:.1f}" if load else ""
    return (
        f"Device: **{dev}**{extra}; torch {meta.get('torch')}, timm {meta.get('timm')}, "
        f"pyautoattack {meta.get('pyautoattack') or 'absent'}; "
        f"{'--quick (tiny shapes)' if meta.get('quick') else 'full sizes'}; "
        f"suite wall time {fmt(meta.get('wall_s'), 0)} s{load_s}."
    )


def train_tables(d: dict[str, Any]) -> str:
    tr = d.get("train", {})
    shape = tr.get("model", {})
    out = [
        f"Model: depth {shape.get('depth')}, width {shape.get('embed_dim')}, "
        f"{shape.get('num_heads')} heads, {shape.get('tokens')} tokens, "
        f"{fmt(shape.get('params'))} parameters; "
        f"{fmt(tr.get('flops_per_image', 0) / 1e9, 3)} GFLOP per training image "
        f"(analytic; flop_counter / analytic = "
        f"{fmt(_get(tr, 'flop_counter', 'ratio_to_analytic'), 3)}); bf16 matmul "
        f"{fmt(_get(tr, 'matmul', 'n'))}^3: "
        f"{fmt(_get(tr, 'matmul', 'bf16_tflops'), 3)} TFLOP/s.",
        "",
    ]
    rows = []
    for key, r in tr.get("runs", {}).items():
        mode = r.get("mode", key) + (f" ({r['graph']} graph)" if r.get("graph") else "")
        rows.append(
            [
                mode,
                fmt(r.get("batch")),
                fmt(r.get("step_ms")),
                fmt(r.get("images_per_s"), 0),
                fmt(r.get("peak_mem_gib")),
                pct(r.get("mfu_vs_bf16_matmul")),
                fmt(r.get("compile_s"), 1),
            ]
        )
    out.append(
        table(
            ["mode", "batch", "ms/step", "images/s", "peak GiB", "MFU vs bf16 matmul", "compile s"],
            rows,
        )
    )
    return "\n".join(out)


def regularizer_table(d: dict[str, Any]) -> str:
    sec = d.get("regularizers", {})
    rows = [
        [
            name,
            fmt(r.get("step_ms")),
            fmt(r.get("ratio"), 3),
            fmt(r.get("target_ratio")),
            fmt(r.get("syncs_per_step")),
            fmt(r.get("syncs_per_epoch_fixed")),
        ]
        for name, r in sec.get("variants", {}).items()
    ]
    head = (
        f"Batch {sec.get('batch')}, {sec.get('precision')}, medians of "
        f"{sec.get('rounds')} interleaved rounds of {sec.get('steps')} steps."
    )
    return (
        head
        + "\n\n"
        + table(
            [
                "variant",
                "ms/step",
                "ratio to baseline",
                "target",
                "host syncs/step",
                "host syncs/epoch (fixed)",
            ],
            rows,
        )
        + sync_sites_list(sec.get("variants", {}))
        + ("\n\n" + compiled_table(d) if compiled_table(d) else "")
    )


def compiled_table(d: dict[str, Any]) -> str:
    """The regularizers' compiled steps (``regularizers.compiled``), or '' if not run."""
    sec = _get(d, "regularizers", "compiled") or {}
    rows = [
        [
            name,
            fmt(r.get("compile_s"), 1),
            fmt(r.get("step_ms")),
            fmt(r.get("ratio"), 3),
            fmt(r.get("speedup_vs_eager"), 3),
            str(sum((r.get("graph_breaks") or {}).values())),
        ]
        for name, r in sec.items()
        if isinstance(r, dict) and "step_ms" in r
    ]
    if not rows:
        return ""
    return f"Compiled ({sec.get('backend')}), same batch and precision:\n\n" + table(
        [
            "variant",
            "compile s",
            "ms/step",
            "ratio to compiled baseline",
            "x eager",
            "graph breaks",
        ],
        rows,
    )


def sync_sites_list(variants: dict[str, Any]) -> str:
    """Where the counted syncs came from (``sync_sites``: site -> count), per variant."""
    lines = [
        f"- {name}: {count} x `{site}`"
        for name, r in variants.items()
        for site, count in (r.get("sync_sites") or {}).items()
    ]
    return (
        "\n\nHost syncs by site (the 2- and 4-step runs together):\n\n" + "\n".join(lines)
        if lines
        else ""
    )


def checkpoint_table(d: dict[str, Any]) -> str:
    ev = _get(d, "checkpoint", "eval_clean") or {}
    sv = _get(d, "checkpoint", "save") or {}
    rows = [
        [
            "clean evaluation, fp32 (the final pass)",
            fmt(ev.get("fp32_s_per_10k")) + " s / 10k images",
        ],
        [
            "per-epoch clean evaluation, bf16 autocast (a CUDA trial's)",
            fmt(ev.get("bf16_s_per_10k")) + " s / 10k images",
        ],
        [
            "checkpoint save (model + optimizer, fsynced)",
            f"{fmt(sv.get('save_s'))} s, {fmt((sv.get('bytes') or 0) / 1e6, 0)} MB",
        ],
        ["checkpoint load + verify", fmt(sv.get("load_s")) + " s"],
    ]
    return table(["what", "cost"], rows)


def attack_tables(d: dict[str, Any]) -> str:
    att = d.get("attacks", {})
    m = att.get("model", {})
    out = [
        f"Model trained {m.get('epochs')} epoch(s) on {m.get('train_images')} embedded "
        f"CIFAR-10 images ({fmt(m.get('train_s'), 1)} s); clean accuracy "
        f"{fmt(att.get('acc_clean'), 1)} % on {m.get('eval_images')} images.",
        "",
    ]
    rows = []
    for name in ("pgd4", "fgsm"):
        r = att.get(name, {})
        rows.append(
            [
                name.upper().replace("PGD4", "PGD-4"),
                fmt(r.get("fp32_images_per_s"), 0),
                fmt(r.get("tf32_images_per_s"), 0),
                fmt(r.get("bf16_images_per_s"), 0),
                fmt(r.get("bf16_speedup"), 2),
                fmt(r.get("acc_fp32")),
                fmt(r.get("acc_tf32")),
                fmt(r.get("acc_bf16")),
                fmt(r.get("acc_diff_bf16_minus_fp32")),
            ]
        )
    out.append(
        table(
            [
                "attack (eps 4/255)",
                "fp32 images/s",
                "TF32 images/s (a trial's)",
                "bf16 images/s",
                "bf16 speed-up",
                "acc fp32 %",
                "acc TF32 %",
                "acc bf16 %",
                "bf16 - fp32 (points)",
            ],
            rows,
        )
    )
    aa = att.get("autoattack", {})
    out.append("")
    if "skipped" in aa:
        out.append(f"AutoAttack: skipped ({aa['skipped']}).")
    else:
        rows = [
            [
                st,
                fmt(_get(aa, st, "n_attacked")),
                fmt(_get(aa, st, "n_fooled")),
                fmt(_get(aa, st, "seconds")),
                fmt(_get(aa, st, "s_per_1000")),
            ]
            for st in ("apgd-ce", "apgd-t", "fab-t", "square")
        ]
        out.append(
            f"AutoAttack, eps 2/255, 10 iterations, each stage alone on the same "
            f"{aa.get('images')} images:\n"
        )
        out.append(table(["stage", "attacked", "fooled", "seconds", "s / 1000 attacked"], rows))
    return "\n".join(out)


def lipschitz_tables(d: dict[str, Any]) -> str:
    lip = d.get("lipschitz", {})
    rows = [
        [
            f"C = {c}",
            fmt(_get(lip, f"jacobian_c{c}", "route")),
            fmt(_get(lip, f"jacobian_c{c}", "images")),
            fmt(_get(lip, f"jacobian_c{c}", "ms_per_image")),
            fmt(_get(lip, f"jacobian_c{c}", "x_fwd_bwd")),
        ]
        for c in (10, 100)
    ]
    out = [table(["‖J_f‖", "route", "images", "ms/image", "x fwd+bwd"], rows), ""]
    h = lip.get("head_bounds", {})
    rows = [
        ["measure_head_bounds (what a trial runs)", fmt(h.get("measure_head_bounds_s"), 4)],
        ["Lanczos matvecs (J J^T u)", fmt(h.get("matvec_s"), 4)],
        ["Lanczos Ritz eigh + bookkeeping", fmt(h.get("ritz_eigh_and_rest_s"), 4)],
        ["Lanczos total, Ritz eigh on the device", fmt(h.get("lanczos_ritz_device_s"), 4)],
        ["Lanczos total, Ritz eigh on the CPU", fmt(h.get("lanczos_ritz_cpu_s"), 4)],
        ["bound SVDs/eigh (head_bounds_at) on the device", fmt(h.get("bounds_svd_device_s"), 4)],
        ["bound SVDs/eigh (head_bounds_at) on the CPU", fmt(h.get("bounds_svd_cpu_s"), 4)],
    ]
    out.append(
        f"Head bounds on {h.get('images')} image(s), every layer and head "
        f"(Lanczos mean iterations {fmt(h.get('lanczos_mean_iterations'), 1)}):\n"
    )
    out.append(table(["part", "seconds"], rows))
    rows = [
        [
            f"{j} x {j}",
            fmt(h.get(f"ritz_eigh_{j}_device_ms"), 3),
            fmt(h.get(f"ritz_eigh_{j}_cpu_ms"), 3),
        ]
        for j in (8, 16, 32)
    ]
    out += [
        "",
        "Batched float64 eigh of one Ritz check (one matrix per image x head), ms per call:\n",
        table(["size", "on the device", "on the CPU (with copies)"], rows),
    ]
    routes = routes_table(d)
    if routes:
        out += ["", routes]
    trained = trained_table(d)
    if trained:
        out += ["", trained]
    verdict = placement_verdict(h, bool(d.get("meta", {}).get("gpu")))
    if verdict:
        out += ["", verdict]
    parts = lip.get("parts", {})
    rows = [
        [name, fmt(_get(parts, name, "images")), fmt((_get(parts, name, "s_per_image") or 0) * 1e3)]
        for name in ("jacobian", "margin", "tokens", "softmax", "heads")  # margin: older runs
        if name in parts
    ]
    if rows:
        out += [
            "",
            f"The projected space's `lipschitz_summary` by part (C = {parts.get('num_classes')}, "
            f"route {parts.get('route')}, batch {parts.get('batch')}):\n",
            table(["part", "images", "ms / image"], rows),
        ]
    s = lip.get("summary", {})
    if s:
        out += [
            "",
            f"Whole `lipschitz_summary` (C = {s.get('num_classes')}) on {s.get('images')} images "
            f"({s.get('head_images')} for the head bounds): {fmt(s.get('seconds'))} s; the parts "
            f"predict {fmt(s.get('parts_predicted_s'))} s (ratio {fmt(s.get('ratio_to_parts'))}).",
        ]
    return "\n".join(out)


def routes_table(d: dict[str, Any]) -> str:
    """The per-step reference route against the batched one (``lipschitz.routes``)."""
    sec = _get(d, "lipschitz", "routes") or {}
    rows = [
        [
            name.replace("_", " "),
            fmt(r.get("images")),
            fmt(r.get("ms_per_image"), 3),
            fmt(r.get("x_train_step"), 1),
            fmt(r.get("mean_iterations"), 1),
            "-"
            if r.get("max_rel_dev_vs_exact_fp32") is None
            else f"{r['max_rel_dev_vs_exact_fp32']:.1e}",
        ]
        for name, r in sec.items()
        if isinstance(r, dict) and "ms_per_image" in r
    ]
    if not rows:
        return ""
    unit = sec.get("train_step_ms_per_image")
    return (
        f"Routes side by side (x train step: multiples of the training step's "
        f"{fmt(unit, 4)} ms per image):\n\n"
        + table(
            ["variant", "images", "ms/image", "x train step", "mean iterations", "max rel. dev."],
            rows,
        )
    )


def trained_table(d: dict[str, Any]) -> str:
    """The same routes on a briefly trained ViT and at random init
    (``lipschitz.trained_vs_random``)."""
    sec = _get(d, "lipschitz", "trained_vs_random") or {}
    rows = [
        [
            route.replace("_", " "),
            fmt(_get(sec, f"{route}_trained", "mean_iterations"), 2),
            fmt(_get(sec, f"{route}_random_init", "mean_iterations"), 2),
            fmt(_get(sec, f"{route}_trained", "ms_per_image"), 3),
            fmt(_get(sec, f"{route}_random_init", "ms_per_image"), 3),
        ]
        for route in ("jacobian_lanczos_fp32", "tokens_default")
        if f"{route}_trained" in sec or f"{route}_random_init" in sec
    ]
    if not rows:
        return ""
    return (
        f"The same images ({sec.get('images')}, C = {sec.get('classes')}) on the briefly trained "
        "ViT and at random init:\n\n"
        + table(
            [
                "route",
                "iterations trained",
                "iterations random",
                "ms/image trained",
                "ms/image random",
            ],
            rows,
        )
    )


def probes_line(d: dict[str, Any]) -> str:
    p = d.get("probes") or {}
    if "share_of_epoch" not in p:
        return ""
    return (
        f"One probe round ({p.get('probe_images')} PGD images, {p.get('probe_lip_images')} "
        f"‖J_f‖ images): PGD {fmt(p.get('pgd_s'))} s + ‖J_f‖ {fmt(p.get('jacobian_s'))} s "
        f"against a {fmt(p.get('train_epoch_s'))} s training epoch: "
        f"**{pct(p.get('share_of_epoch'))}** of the epoch at `probe_every: 1`."
    )


def placement_verdict(h: dict[str, Any], on_gpu: bool) -> str:
    """Which ``linalg_placement`` the measured head-bound rows favour on a GPU ('' elsewhere).

    lipsweep's default, 'auto', puts the small decompositions on the CPU when the inputs are
    on CUDA (``lipsweep.lipschitz._krylov.linalg_device``): this says whether to keep it.
    """
    pairs = [
        ("bound SVDs", h.get("bounds_svd_device_s"), h.get("bounds_svd_cpu_s")),
        ("Lanczos with its Ritz eigh", h.get("lanczos_ritz_device_s"), h.get("lanczos_ritz_cpu_s")),
    ]
    pairs = [(name, dev, cpu) for name, dev, cpu in pairs if dev and cpu]
    if not on_gpu or not pairs:
        return ""
    dev_total = sum(dev for _, dev, _ in pairs)
    cpu_total = sum(cpu for _, _, cpu in pairs)
    each = "; ".join(f"{name}: device {dev:.3f} s, CPU {cpu:.3f} s" for name, dev, cpu in pairs)
    if cpu_total <= dev_total:
        return (
            f"Placement: the CPU is {dev_total / cpu_total:.2f}x faster ({each}): "
            "`linalg_placement` 'auto' (CPU for CUDA inputs) stays."
        )
    return (
        f"Placement: the device is {cpu_total / dev_total:.2f}x faster ({each}): make "
        "'auto' mean 'same' for CUDA inputs in `lipsweep/lipschitz/_krylov.py` `linalg_device`."
    )


def trial_tables(d: dict[str, Any]) -> str:
    tr = d.get("trial", {})
    rt = tr.get("run_trial", {})
    met = rt.get("metrics", {})
    out = [
        f"One-epoch `run_trial` ({fmt(_get(rt, 'config', 'train_size'))} training images, "
        f"batch {fmt(_get(rt, 'config', 'batch_size'))}, "
        f"{fmt(_get(rt, 'config', 'eval_size'))} evaluation images, device "
        f"{fmt(_get(rt, 'config', 'device'))}): {fmt(rt.get('wall_s'), 1)} s wall; epoch "
        f"{fmt(_get(rt, 'epoch', 'epoch_seconds'), 1)} s; attacks "
        f"{fmt(met.get('eval_attack_seconds'), 1)} s; Lipschitz "
        f"{fmt(met.get('eval_lipschitz_seconds'), 1)} s.",
        "",
    ]
    p = tr.get("projection", {})
    out.append(projection_text(p))
    again = tr.get("projection_lipschitz_batch")
    if again:
        out += [
            "",
            f"Again with the ‖J_f‖ and token-Jacobian parts of `lipschitz.batch` "
            f"({again.get('lipschitz_from')}):",
            "",
            projection_text(again),
        ]
    return "\n".join(out)


def projection_text(p: dict[str, Any]) -> str:
    """The projected trial: which space, its assumptions, the parts, the shares, the
    checkpoint cadence and what a preemption loses."""
    a = p.get("assumptions", {})
    parts = p.get("parts_s", {})
    total = p.get("total_s")
    rows = [
        [
            k.removesuffix("_s").replace("_", " "),
            fmt(v, 0),
            pct(v / total) if v is not None and total else "-",
        ]
        for k, v in parts.items()
    ]
    rows.append(["**total**", f"**{fmt(total, 0)}**", "100.0 %" if total else "-"])
    pre = p.get("preemption", {})
    return "\n".join(
        [
            f"Projected cost of one trial of **`{p.get('space')}`** (its first trial; read from "
            f"the space: {a.get('epochs')} epochs x {a.get('steps_per_epoch')} steps of "
            f"{a.get('batch_size')} on {a.get('train_images')} images, clean evaluation of "
            f"{a.get('eval_images')} images every epoch, a checkpoint every "
            f"{a.get('checkpoint_every')} epoch(s) ({a.get('checkpoints')} in all), attacks on "
            f"{a.get('attack_images')} images, the Lipschitz summary on {a.get('lip_images')} "
            f"images ({a.get('lip_head_images')} for the head bounds), {a.get('num_classes')} "
            f"classes) on {p.get('device')}, train step `{a.get('train_step_key')}` x "
            f"{fmt(a.get('batch_scale'))}:\n",
            table(["part", "seconds", "share"], rows),
            "",
            f"= **{fmt(p.get('hours'), 3)} h** (slowest regularizer: "
            f"{fmt(p.get('hours_slowest_regularizer'), 3)} h; target for it "
            f"{p.get('target_hours')} h"
            f"); the {p.get('grid_trials')}-trial grid: {fmt(p.get('grid_hours'), 1)} h. "
            f"Lipschitz share {pct(p.get('lipschitz_share'))}; checkpoint share "
            f"{pct(p.get('checkpoint_share'))} (target <= {pct(p.get('checkpoint_share_target'))}"
            f"; met from `checkpoint_every` {fmt(p.get('checkpoint_every_for_target'))}; upload "
            f"not included). A preemption loses at most {pre.get('epochs_lost_max_in_training')}"
            f" epoch(s) in training ({fmt(pre.get('lost_s_max_in_training'), 0)} s), and "
            f"{pre.get('epochs_lost_in_final_evaluation')} epoch(s) plus the evaluation during "
            f"the final evaluation ({fmt(pre.get('lost_s_in_final_evaluation'), 0)} s). "
            f"Missing inputs: {p.get('missing') or 'none'}.",
        ]
    )


def phases_table(d: dict[str, Any]) -> str:
    """The order the suite ran in, each phase's cap, time and outcome ('' without phases)."""
    phases = _get(d, "meta", "phases") or []
    rows = [
        [
            str(i),
            ph.get("name", "?"),
            "mandatory" if ph.get("mandatory") else "optional",
            fmt(ph.get("cap_s"), 0),
            fmt(ph.get("seconds"), 1),
            str(ph.get("status")) + (f" ({ph['reason']})" if ph.get("reason") else ""),
        ]
        for i, ph in enumerate(phases, 1)
    ]
    if not rows:
        return ""
    return table(["#", "phase", "kind", "cap s", "seconds", "status"], rows)


SMOKE_METRICS = ("acc_clean", "acc_pgd_4", "acc_aa_2", "lip_jacobian_median")


def smoke_line(d: dict[str, Any]) -> str:
    """The `--smoke-trial` result in one paragraph ('' when the suite ran without it)."""
    r = _get(d, "smoke_trial", "lipsweep_train")
    if not isinstance(r, dict):
        return ""
    space = Path(str(r.get("space", "the space"))).name
    if "skipped" in r:
        return f"`{space}` trial through `lipsweep train`: skipped ({r['skipped']})."
    cfg = r.get("config", {})
    head = (
        f"`{space}` trial through `lipsweep train` ({cfg.get('model')}, "
        f"regularizer {cfg.get('regularizer')}, device {cfg.get('device')}, "
        f"{cfg.get('train_size')} training images, {cfg.get('epochs')} epoch(s), "
        f"evaluation on {cfg.get('eval_size')}; offline overrides "
        f"{r.get('offline_overrides') or 'none'}): "
    )
    if "error" in r:
        return head + f"**failed** after {fmt(r.get('wall_s'), 1)} s: {r['error']}."
    met = r.get("metrics", {})
    shown = ", ".join(f"{k} {fmt(met.get(k))}" for k in SMOKE_METRICS if k in met)
    return head + f"rc {r.get('rc')}, {fmt(r.get('wall_s'), 1)} s wall; {shown or 'no metrics'}."


def report(d: dict[str, Any]) -> str:
    parts = [device_line(d.get("meta", {}))]
    order = phases_table(d)
    if order:
        parts.append("### Order and caps\n\n" + order)
    parts += [
        "### Train step\n\n" + train_tables(d),
        "### Regularizers\n\n" + regularizer_table(d),
        "### Per-epoch evaluation and checkpoint\n\n" + checkpoint_table(d),
        "### Attacks\n\n" + attack_tables(d),
        "### Lipschitz estimators\n\n" + lipschitz_tables(d),
        "### Trial and projection\n\n" + trial_tables(d),
    ]
    probes = probes_line(d)
    if probes:
        parts.insert(-1, "### Per-epoch probes\n\n" + probes)
    smoke = smoke_line(d)
    if smoke:
        parts.append("### Smoke trial\n\n" + smoke)
    errors = d.get("errors") or []
    skipped = [
        f"{sec}/{k}"
        for sec, body in d.items()
        if isinstance(body, dict)
        for k, v in body.items()
        if isinstance(v, dict) and "skipped" in v
    ]
    if errors or skipped:
        parts.append(
            "Errors: "
            + ("; ".join(errors) or "none")
            + ". Skipped: "
            + (", ".join(skipped) or "none")
            + "."
        )
    return "\n\n".join(parts) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("json", type=Path, help="output of benchmarks/gpu_suite.py")
    args = p.parse_args(argv)
    sys.stdout.write(report(json.loads(args.json.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
