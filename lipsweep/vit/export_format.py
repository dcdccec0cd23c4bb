"""The exported-model format: ``model.safetensors`` + ``config.json`` (read and checked here;
written by :mod:`lipsweep.decide.export`).

An export folder opens with timm alone, ``timm.create_model("local-dir:EXPORT",
pretrained=True)``: config.json holds the keys timm's loader reads (``architecture``,
``num_classes``, ``model_args``, ``pretrained_cfg`` with mean/std and input size) next to
lipsweep's own record (``format``, ``timm``: the ``create_model`` arguments,
``normalization``: the pixel mean/std, ``trial_config``, ``source``), and both readers take
the one ``model.safetensors`` (the timm network's own state dict). :func:`load_exported`
returns the model in eval mode mapping [0, 1] pixels to logits (docs/contract.md); timm's
model takes pixels normalised with ``pretrained_cfg``'s mean/std and gives the same logits.
:func:`load_exported` does not trust the folder it reads (:class:`ExportError`): nothing is
unpickled, only lipsweep's ViT family is built, and links may not leave the folder.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors import SafetensorError, safe_open

from lipsweep.core.config_base import ConfigError, from_mapping, show
from lipsweep.vit.models import PixelModel


def timm_spec(flat: dict[str, Any]) -> dict[str, Any]:
    """``timm.create_model`` arguments that rebuild a trial's network from its flat config."""
    kwargs = {k: flat[k] for k in TIMM_KWARGS if flat.get(k) is not None}
    return {"model_name": flat["model"], "kwargs": kwargs}


TIMM_HUB_KEYS = ("architecture", "num_classes", "model_args", "pretrained_cfg")
"""The top-level keys of config.json that timm's loader reads (``local-dir:``/``hf-hub:``);
it ignores every other key, so lipsweep's own record sits beside them in the same file."""


def timm_hub_config(
    spec: dict[str, Any], mean: tuple[float, ...], std: tuple[float, ...]
) -> dict[str, Any]:
    """What ``timm.create_model("local-dir:EXPORT", pretrained=True)`` reads from config.json
    (timm's ``_parse_model_cfg``): the architecture without its pretrained tag, the same
    ``create_model`` arguments as ``spec`` (:func:`timm_spec`), and a ``pretrained_cfg`` (only
    ``PretrainedCfg`` fields) whose mean/std/input size are the trial's, so timm's
    ``resolve_model_data_config`` + ``create_transform`` give the model its inputs. A trial
    sees its images whole at ``img_size`` (no resize, no crop): ``crop_pct`` 1."""
    from timm.models import split_model_name_tag

    kwargs = spec["kwargs"]
    size = kwargs.get("img_size", 224)
    num_classes = kwargs.get("num_classes", 1000)
    return {
        "architecture": split_model_name_tag(spec["model_name"])[0],
        "num_classes": num_classes,
        "model_args": dict(kwargs),
        "pretrained_cfg": {
            "input_size": [3, size, size],
            "fixed_input_size": True,
            "interpolation": "bicubic",
            "crop_pct": 1.0,
            "crop_mode": "center",
            "mean": list(mean),
            "std": list(std),
            "num_classes": num_classes,
            "first_conv": "patch_embed.proj",
            "classifier": "head",
        },
    }


def build_config_json(
    flat: dict[str, Any], mean: tuple[float, ...], std: tuple[float, ...], source: dict[str, Any]
) -> dict[str, Any]:
    """config.json of an export: timm's keys (:func:`timm_hub_config`) and lipsweep's own
    (``format``, ``timm``, ``normalization``, ``trial_config``, ``source``) side by side."""
    spec = timm_spec(flat)
    return {
        **timm_hub_config(spec, mean, std),
        "format": "lipsweep-export/1",
        "timm": spec,
        "normalization": {"mean": list(mean), "std": list(std), "input_range": [0.0, 1.0]},
        "trial_config": flat,
        "source": source,
    }


TIMM_KWARGS = (
    "img_size",
    "patch_size",
    "num_classes",
    "qkv_bias",
    "depth",
    "embed_dim",
    "num_heads",
)


MAX_JSON_BYTES = 16 * 2**20
CONFIG_FILE = "config.json"
"""An export's config: timm's keys and lipsweep's record (module docstring)."""
WEIGHTS_FILE = "model.safetensors"
"""An export's weights: the timm network's state dict."""


class ExportError(ValueError):
    """An export folder is refused by :func:`load_exported`; names the file and the field."""

    def __init__(self, file: str | os.PathLike, field: str, message: str) -> None:
        self.file, self.field, self.message = str(file), field, message
        super().__init__(f"{self.file}: {field}: {message}")


def _open_inside(folder: Path, name: str) -> tuple[Path, Any]:
    """``folder/name`` opened for reading: a regular file whose real path is inside ``folder``
    (a symlink may not leave it), opened non-blocking (a FIFO is refused, not waited on)."""
    path = folder / name
    if not path.exists():
        raise ExportError(
            path,
            "file",
            f"missing: {folder} is not a lipsweep export (needs config.json and model.safetensors)",
        )
    real = path.resolve()
    if folder.resolve() not in real.parents:
        raise ExportError(
            path, "file", f"is a link to {show(str(real))}, outside the export folder"
        )
    try:
        fh = open(os.open(real, os.O_RDONLY | os.O_NONBLOCK), "rb")
    except OSError as exc:
        raise ExportError(path, "file", f"cannot open: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
        fh.close()
        raise ExportError(path, "file", "is not a regular file")
    return path, fh


def _read_config(folder: Path) -> tuple[Path, dict[str, Any]]:
    path, fh = _open_inside(folder, CONFIG_FILE)
    with fh:
        raw = fh.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise ExportError(path, "file", f"larger than {MAX_JSON_BYTES:,} bytes")
    try:
        config = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ExportError(path, "json", f"not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(config, dict):
        raise ExportError(path, "json", "top level is not an object")
    return path, config


def _check_config(path: Path, config: dict[str, Any]) -> tuple[str, dict[str, Any], tuple, tuple]:
    """(model name, timm kwargs, mean, std) of a config.json, each checked: only lipsweep's
    own ViT family with its own keyword arguments, built locally (never from the network)."""
    from timm.models import split_model_name_tag

    from lipsweep.vit.models import ModelConfig, list_vit_models

    if config.get("format") != "lipsweep-export/1":
        raise ExportError(
            path, "format", f"must be 'lipsweep-export/1', got {show(config.get('format'))}"
        )
    spec = config.get("timm")
    if not isinstance(spec, dict) or not isinstance(spec.get("kwargs"), dict):
        raise ExportError(path, "timm", "must be an object with model_name and kwargs")
    name, kwargs = spec.get("model_name"), spec["kwargs"]
    # a pretrained tag (``vit_base_patch16_224.orig_in21k_ft_in1k``) names the weights the
    # trial started from, not the architecture: the export's own weights replace them
    if not isinstance(name, str) or split_model_name_tag(name)[0] not in list_vit_models():
        raise ExportError(
            path,
            "timm.model_name",
            f"{show(name)} is not one of timm's ViTs (vit_*, built locally; hub names are refused)",
        )
    unknown = sorted(str(k) for k in kwargs if k not in TIMM_KWARGS)
    if unknown:
        raise ExportError(
            path,
            f"timm.kwargs.{unknown[0][:40]}",
            f"not allowed; an export sets only {list(TIMM_KWARGS)}",
        )
    try:
        cfg = from_mapping(ModelConfig, {"model": name, **kwargs})
    except ConfigError as err:
        raise ExportError(path, f"timm.kwargs.{err.field}", err.message) from None
    norm = config.get("normalization")
    if not isinstance(norm, dict):
        raise ExportError(path, "normalization", "must be an object with mean and std")
    for key in ("mean", "std"):
        vals = norm.get(key)
        if (
            not isinstance(vals, list)
            or len(vals) != 3
            or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in vals
            )
        ):
            raise ExportError(
                path, f"normalization.{key}", f"must be 3 finite numbers, got {show(vals)}"
            )
    if not all(v > 0 for v in norm["std"]):
        raise ExportError(path, "normalization.std", f"must be > 0, got {norm['std']}")
    kept = {k: getattr(cfg, k) for k in TIMM_KWARGS if k in kwargs}
    return cfg.model, kept, tuple(norm["mean"]), tuple(norm["std"])


def _check_timm_keys(path: Path, config: dict[str, Any]) -> None:
    """Refuse a config.json whose timm keys (:data:`TIMM_HUB_KEYS`) build another network, or
    normalise otherwise, than lipsweep's own keys: timm and :func:`load_exported` would give
    different logits. An export written before timm's keys (none of them) passes."""
    if not any(k in config for k in TIMM_HUB_KEYS):
        return
    norm = config["normalization"]
    want = timm_hub_config(config["timm"], norm["mean"], norm["std"])
    pcfg = config.get("pretrained_cfg")
    pcfg = pcfg if isinstance(pcfg, dict) else {}
    args = config.get("model_args")
    args = args if isinstance(args, dict) else {}
    pairs = [
        ("architecture", config.get("architecture"), want["architecture"]),
        ("num_classes", config.get("num_classes"), want["num_classes"]),
        *(
            (f"model_args.{k}", args.get(k), want["model_args"].get(k))
            for k in sorted({*map(str, args), *want["model_args"]})
        ),
        *((f"pretrained_cfg.{k}", pcfg.get(k), want["pretrained_cfg"][k]) for k in ("mean", "std")),
    ]
    for field, got, expected in pairs:
        if got != expected or type(got) is not type(expected):
            raise ExportError(
                path,
                field[:60],
                f"{show(got)} disagrees with {show(expected)}, what lipsweep's keys (timm, "
                "normalization) give: timm would build or feed another model than load_exported",
            )


def _read_weights(folder: Path, expected: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """The tensors of model.safetensors, after its header was checked against ``expected``
    (names and shapes of the model config.json describes): nothing is allocated before."""
    from lipsweep.core.safetensors_header import HeaderError, read_header

    path, fh = _open_inside(folder, WEIGHTS_FILE)
    with fh:  # held open: the checked regular file is the one read
        try:
            header = read_header(path)
        except HeaderError as exc:
            raise ExportError(path, exc.field, str(exc).split(": ", 1)[1]) from None
        for key in sorted(set(expected) | set(header)):
            if key not in header:
                raise ExportError(path, f"tensor {show(key)}", "missing (config.json builds it)")
            if key not in expected:
                raise ExportError(
                    path, f"tensor {show(key)}", "not part of the model config.json builds"
                )
            dtype, shape = header[key]
            if shape != expected[key]:
                raise ExportError(
                    path,
                    f"tensor {show(key)}",
                    f"shape {list(shape)} differs from "
                    f"{list(expected[key])}, the model config.json builds",
                )
            if dtype not in ("F16", "BF16", "F32", "F64"):
                raise ExportError(path, f"tensor {show(key)}", f"dtype {dtype} is not a float")
        try:
            with safe_open(str(path), framework="pt") as weights:
                return {key: weights.get_tensor(key) for key in weights.keys()}
        except SafetensorError as exc:
            raise ExportError(path, "header", str(exc)[:200]) from None


def load_exported(
    path: str | os.PathLike, device: Optional[str | torch.device] = None
) -> PixelModel:
    """Rebuild an exported model: eval mode, maps [0, 1] pixels to logits (docs/contract.md).

    The folder is not trusted: only lipsweep's ViT family is built (never from the network),
    no file may be a link out of the folder, and the weights file's own tensor shapes are
    checked against the configured model (built on the meta device) before anything is
    allocated. Every refusal is one :class:`ExportError` naming the file and the field."""
    import timm

    folder = Path(path)
    if not folder.is_dir():
        raise ExportError(
            folder,
            "path",
            "not a folder (a lipsweep export holds config.json and model.safetensors)",
        )
    cfg_path, config = _read_config(folder)
    name, kwargs, mean, std = _check_config(cfg_path, config)
    _check_timm_keys(cfg_path, config)
    try:
        with torch.device("meta"):  # shapes only: nothing is allocated
            shapes = {
                k: tuple(v.shape)
                for k, v in timm.create_model(name, pretrained=False, **kwargs).state_dict().items()
            }
    except (AssertionError, RuntimeError, ValueError, TypeError) as exc:  # e.g. heads vs width
        raise ExportError(
            cfg_path, "timm.kwargs", f"timm cannot build {name} with {kwargs}: {str(exc)[:120]}"
        ) from None
    state = _read_weights(folder, shapes)
    net = timm.create_model(name, pretrained=False, **kwargs)
    net.load_state_dict(state)
    model = PixelModel(net, mean, std)
    if device is not None:
        model = model.to(device)
    return model.eval()


def model_io(folder: Path) -> dict[str, Any]:
    """What a served model of the export ``folder`` takes and gives: ``img_size``,
    ``num_classes`` (inputs (N, 3, img_size, img_size) in [0, 1], logits (N, num_classes))
    and the export ``format``, read from its ``config.json``."""
    config = _read_config(Path(folder))[1]
    kwargs = config["timm"]["kwargs"]
    return {
        "img_size": int(kwargs.get("img_size", 224)),
        "num_classes": int(kwargs.get("num_classes", 1000)),
        "format": config.get("format"),
    }
