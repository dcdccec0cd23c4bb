"""Writing a model export: ``model.safetensors`` + ``config.json`` + ``metrics.json`` + a
model card (``README.md``, with the Hugging Face Hub's YAML header ``model-index``).

The format itself (what config.json holds, and reading it back with :func:`load_exported`,
which timm alone can do too) is :mod:`lipsweep.vit.export_format`. The folder is written to a
temporary sibling and swapped into place, so a failed export never leaves a half-written
folder nor loses the previous one; ``--force`` replaces only a folder marked as a previous
export (:data:`MARKER`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import yaml
from safetensors import SafetensorError
from safetensors.torch import save_file

from lipsweep.core.config_base import UsageError, show
from lipsweep.core.metric_names import ACC_PREFIX, SPEC_METRICS
from lipsweep.core.paths import (
    check_folder,
    check_replaceable,
    refuse_working_folder,
    removing,
)
from lipsweep.regularizers import find_spec, shown_params
from lipsweep.vit.export_format import CONFIG_FILE, WEIGHTS_FILE


def _card_metadata(config: dict[str, Any], metrics: dict[str, float]) -> dict[str, Any]:
    """The card's YAML header as the Hugging Face Hub reads it: library, task and the
    ``model-index`` results (one per metric of the card's table, named as in MLflow; the
    accuracies are ``type: accuracy`` in percent). Written, never pushed."""
    flat = config["trial_config"]
    dataset = str(flat.get("dataset"))
    results = [
        {
            "name": k,
            "type": "accuracy" if k.startswith(ACC_PREFIX) else k,
            "value": float(metrics[k]),
        }
        for k in SPEC_METRICS
        if k in metrics and math.isfinite(metrics[k])
    ]
    header: dict[str, Any] = {
        "library_name": "timm",
        "pipeline_tag": "image-classification",
        "tags": ["image-classification", "timm", "lipsweep", "adversarial-robustness"],
    }
    if results:
        header["model-index"] = [
            {
                "name": str(config["source"].get("run_name") or config["timm"]["model_name"]),
                "results": [
                    {
                        "task": {"type": "image-classification", "name": "Image Classification"},
                        "dataset": {"name": dataset, "type": dataset, "split": "test"},
                        "metrics": results,
                    }
                ],
            }
        ]
    return header


def card_body(card: str) -> str:
    """A model card without its YAML header (for where Markdown is shown as such: MLflow's
    model version description)."""
    if not card.startswith("---\n"):
        return card
    _, sep, body = card[len("---\n") :].partition("\n---\n")
    return body.lstrip("\n") if sep else card


def _model_card(config: dict[str, Any], metrics: dict[str, float]) -> str:
    header = yaml.safe_dump(_card_metadata(config, metrics), sort_keys=False, allow_unicode=True)
    src = config["source"]
    flat = config["trial_config"]
    rows = "\n".join(f"| `{k}` | {metrics[k]:.4g} |" for k in SPEC_METRICS if k in metrics)
    reg = flat.get("regularizer", "none")
    spec = find_spec(reg)
    shown = spec.shown if spec is not None else shown_params()
    reg_params = ", ".join(f"{k}={flat[k]}" for k in shown if k in flat)
    t = config["timm"]
    kwargs = "".join(f", {k}={v!r}" for k, v in t["kwargs"].items())  # Python, not JSON
    return f"""---
{header}---

# {t["model_name"]} — {reg}{f" ({reg_params})" if reg_params else ""}

Exported by lipsweep from MLflow run `{src.get("run_id", "?")}` of experiment
`{src.get("experiment", "?")}` (tracking URI `{src.get("tracking_uri", "?")}`), selected by
`{src.get("selected_by", "run id")}`.

- Architecture: `timm.create_model({t["model_name"]!r}{kwargs})`
- Input: RGB pixels in [0, 1], {flat.get("img_size")}x{flat.get("img_size")}; normalisation
  (mean {config["normalization"]["mean"]}, std {config["normalization"]["std"]}) is applied by
  the loader's wrapper. timm alone opens this folder too (`local-dir:`, below): its model
  takes the normalised pixels (config.json's `pretrained_cfg`) and gives the same logits.
- Data: `{flat.get("dataset")}`; {flat.get("epochs")} epochs, {flat.get("optimizer")} lr
  {flat.get("lr")}, batch {flat.get("batch_size")}, seed {flat.get("seed")}.

| metric | value |
|---|---|
{rows}

Accuracies are percent on the trial's seeded evaluation subset; FGSM/PGD/AutoAttack are
L-infinity with eps = n/255 (suffix n). `lip_jacobian_*` summarise ||J_f(x)||_2 over the same
images (`lip_jacobian_tokens_*`: w.r.t. the token embeddings, the paper's Fig. 4).

```python
import lipsweep
model = lipsweep.load_exported("{"<this folder>"}")   # eval mode, [0, 1] pixels -> logits

import timm  # or timm alone: the same network, on normalised pixels the same logits
net = timm.create_model("local-dir:{"<this folder>"}", pretrained=True).eval()
transform = timm.data.create_transform(**timm.data.resolve_model_data_config(net))
```
"""


MARKER = ".lipsweep-export"
"""Written into every export; ``--force`` replaces only a folder that holds it."""
METRICS_FILE = "metrics.json"
EXPORT_FILES = frozenset({WEIGHTS_FILE, CONFIG_FILE, METRICS_FILE, "README.md", MARKER})


def check_out(out: str | os.PathLike, force: bool, make_parents: bool = True) -> None:
    """Raise ConfigError or UsageError unless :func:`write_export` may write ``out``.

    ``out`` must pass :func:`lipsweep.core.paths.check_folder` (not a file, a link or
    read-only; its parent must exist unless ``make_parents``). A missing or empty folder is
    fine. Otherwise ``force`` is needed, and it replaces only a previous lipsweep export
    (holding the marker file and nothing but export files); never the working folder or one
    of its ancestors, whatever it holds (:func:`lipsweep.core.paths.check_replaceable`)."""
    check_folder("--out", out, make_parents=make_parents)
    out = Path(out)
    if not out.exists():
        return
    refuse_working_folder("--out", out)
    if not any(out.iterdir()):
        return
    if not force:
        raise UsageError(
            f"--out {out} exists and is not empty; pass --force to replace a previous export"
        )
    check_replaceable("--out", out, MARKER, "a lipsweep export")
    other = sorted(
        e.name
        for e in out.iterdir()
        if e.name not in EXPORT_FILES or e.is_symlink() or not e.is_file()
    )
    if other:
        raise UsageError(
            f"--out {out} holds {show(other)} besides a lipsweep export; --force "
            "replaces only a folder holding nothing else"
        )


def write_export(
    out: Path,
    state_dict: dict[str, torch.Tensor],
    config: dict[str, Any],
    metrics: dict[str, float],
    force: bool = False,
) -> Path:
    """Write an export folder (see :func:`check_out` for what ``force`` may replace).

    The new export is written to a hidden sibling and swapped in with two renames, so a
    failure at any point leaves the previous export (if any) intact."""
    check_out(out, force)
    out = Path(os.path.abspath(out))
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    with removing(tmp, str(out), errors=(OSError, SafetensorError)):
        save_file(
            {k: v.contiguous() for k, v in state_dict.items()},
            str(tmp / WEIGHTS_FILE),
            metadata={"format": "pt"},
        )
        os.chmod(tmp / WEIGHTS_FILE, 0o666 & ~_umask())  # safetensors writes 0600
        (tmp / CONFIG_FILE).write_text(json.dumps(config, indent=2, sort_keys=True))
        (tmp / METRICS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True))
        (tmp / "README.md").write_text(_model_card(config, metrics))
        (tmp / MARKER).write_text(json.dumps({"format": config.get("format")}) + "\n")
        if not out.exists():
            os.rename(tmp, out)
            return out
        shutil.rmtree(old, ignore_errors=True)
        os.rename(out, old)  # swap: the existing export stays whole until the new one is in place
        try:
            os.rename(tmp, out)
        except OSError:
            os.rename(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    return out


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
