"""Self-describing model exports: ``model.safetensors`` + ``config.json`` + ``metrics.json``.

An export folder rebuilds with timm alone (``config.json["timm"]`` holds the architecture name
and the keyword arguments of ``timm.create_model``; ``config.json["normalization"]`` the
pixel mean/std), and :func:`load_exported` returns the model in eval mode mapping [0, 1]
pixels to logits (SPEC §3). Nothing is unpickled: weights are safetensors, the rest JSON.
The folder is written to a temporary sibling and renamed into place, so a failed export never
leaves a half-written folder.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file, save_file

from lipsweep.models import PixelModel

SPEC_METRICS = ("acc_clean", "acc_fgsm_2", "acc_fgsm_4", "acc_pgd_2", "acc_pgd_4", "acc_aa_2",
                "lip_jacobian_mean", "lip_jacobian_median", "lip_jacobian_p90",
                "lip_jacobian_p99", "lip_jacobian_max", "lip_jacobian_tokens_mean",
                "lip_jacobian_tokens_median", "lip_jacobian_tokens_p90",
                "lip_jacobian_tokens_p99", "lip_jacobian_tokens_max")


def timm_spec(flat: dict[str, Any]) -> dict[str, Any]:
    """``timm.create_model`` arguments that rebuild a trial's network from its flat config."""
    kwargs = {k: flat[k] for k in ("img_size", "patch_size", "num_classes", "qkv_bias",
                                   "depth", "embed_dim", "num_heads") if flat.get(k) is not None}
    return {"model_name": flat["model"], "kwargs": kwargs}


def build_config_json(flat: dict[str, Any], mean: tuple[float, ...], std: tuple[float, ...],
                      source: dict[str, Any]) -> dict[str, Any]:
    return {"format": "lipsweep-export/1", "timm": timm_spec(flat),
            "normalization": {"mean": list(mean), "std": list(std), "input_range": [0.0, 1.0]},
            "trial_config": flat, "source": source}


def _model_card(config: dict[str, Any], metrics: dict[str, float]) -> str:
    src = config["source"]
    flat = config["trial_config"]
    rows = "\n".join(f"| `{k}` | {metrics[k]:.4g} |" for k in SPEC_METRICS if k in metrics)
    reg = flat.get("regularizer", "none")
    reg_params = ", ".join(f"{k}={flat[k]}" for k in ("k", "lam", "aggregation", "lam_q",
                                                     "lam_k", "lam_v") if k in flat)
    t = config["timm"]
    return f"""# {t['model_name']} — {reg}{f' ({reg_params})' if reg_params else ''}

Exported by lipsweep from MLflow run `{src.get('run_id', '?')}` of experiment
`{src.get('experiment', '?')}` (tracking URI `{src.get('tracking_uri', '?')}`), selected by
`{src.get('selected_by', 'run id')}`.

- Architecture: `timm.create_model("{t['model_name']}", **{json.dumps(t['kwargs'])})`
- Input: RGB pixels in [0, 1], {flat.get('img_size')}x{flat.get('img_size')}; normalisation
  (mean {config['normalization']['mean']}, std {config['normalization']['std']}) is applied by
  the loader's wrapper.
- Data: `{flat.get('dataset')}`; {flat.get('epochs')} epochs, {flat.get('optimizer')} lr
  {flat.get('lr')}, batch {flat.get('batch_size')}, seed {flat.get('seed')}.

| metric | value |
|---|---|
{rows}

Accuracies are percent on the trial's seeded evaluation subset; FGSM/PGD/AutoAttack are
L-infinity with eps = n/255 (suffix n). `lip_jacobian_*` summarise ||J_f(x)||_2 over the same
images (`lip_jacobian_tokens_*`: w.r.t. the token embeddings, the paper's Fig. 4).

```python
import lipsweep
model = lipsweep.load_exported("{'<this folder>'}")   # eval mode, [0, 1] pixels -> logits
```
"""


def write_export(out: Path, state_dict: dict[str, torch.Tensor], config: dict[str, Any],
                 metrics: dict[str, float], force: bool = False) -> Path:
    """Write an export folder atomically. Refuses a non-empty ``out`` unless ``force``."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} exists and is not empty; pass --force to overwrite it")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        save_file({k: v.contiguous() for k, v in state_dict.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
        (tmp / "README.md").write_text(_model_card(config, metrics))
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def load_exported(path: str | os.PathLike, device: Optional[str | torch.device] = None
                  ) -> PixelModel:
    """Rebuild an exported model: eval mode, maps [0, 1] pixels to logits (SPEC §3)."""
    import timm

    folder = Path(path)
    cfg_path, weights = folder / "config.json", folder / "model.safetensors"
    if not cfg_path.is_file() or not weights.is_file():
        raise FileNotFoundError(f"{folder} is not a lipsweep export (needs config.json and "
                                "model.safetensors)")
    config = json.loads(cfg_path.read_text())
    spec = config["timm"]
    net = timm.create_model(spec["model_name"], pretrained=False, **spec["kwargs"])
    net.load_state_dict(load_file(str(weights)))
    norm = config["normalization"]
    model = PixelModel(net, tuple(norm["mean"]), tuple(norm["std"]))
    if device is not None:
        model = model.to(device)
    return model.eval()
