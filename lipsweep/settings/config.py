"""The trial configuration: one dataclass per concern, one flat dict for everything else.

:class:`TrialConfig` composes the section dataclasses (model, data, optimisation, regularizer,
robustness suite, Lipschitz estimates, per-epoch probes, run settings). Each section validates
itself in ``__post_init__``; cross-section rules (k < tokens, classes match the dataset) are
checked by TrialConfig. Field names are unique across sections, so a trial serialises to ONE
flat dict (:meth:`TrialConfig.to_flat`) that is at once the Ray Tune sample, the MLflow params
and the exported ``config.json``; :meth:`TrialConfig.from_flat` is its inverse and rejects
unknown keys.

Example::

    >>> cfg = TrialConfig.from_flat({"epochs": 2, "regularizer": "none", "seed": 3})
    >>> TrialConfig.from_flat(cfg.to_flat()) == cfg
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Union

import yaml

from lipsweep.attacks.config import RobustnessConfig
from lipsweep.core.config_base import (
    MAX_YAML_BYTES,
    ConfigError,
    YamlRefused,
    check_choice,
    check_int,
    check_max,
    check_positive,
    check_range,
    from_mapping,
    key_name,
    load_yaml_text,
    show,
)
from lipsweep.core.metric_names import EPOCH_METRICS, probe_metrics
from lipsweep.data.config import DataConfig
from lipsweep.lipschitz.config import LipschitzConfig
from lipsweep.regularizers.config import RegularizerConfig
from lipsweep.vit.config import ModelConfig

MAX_EPOCHS = 10_000
MAX_BATCH = 65_536

WEIGHT_DECAY_SCOPES = ("weights", "all")


@dataclass
class OptimConfig:
    """Optimisation recipe. Defaults follow the paper / Hu et al. 2024 recipe (docs/science.md
    §2)."""

    epochs: int = 40
    """Training epochs (paper: 40)."""
    batch_size: int = 64
    """Training batch size (Hu et al. 2024 recipe: 64; the paper states 512)."""
    lr: float = 0.1
    """Peak learning rate (Hu et al. 2024: SGD 0.1; the paper does not state it)."""
    optimizer: str = "sgd"
    """'sgd' (momentum, the paper) or 'adamw' (useful for tiny ViTs from scratch)."""
    momentum: float = 0.9
    """SGD momentum (paper: 0.9)."""
    weight_decay: float = 1e-4
    """Weight decay (paper: 1e-4)."""
    weight_decay_scope: str = "weights"
    """Which parameters decay: 'weights' (all but 1-D parameters (norms, biases), pos_embed and
    cls_token) or 'all' (every parameter, as Hu et al.'s code: SGD over model.parameters())."""
    warmup_epochs: float = 0.0
    """Linear warmup length in epochs before the cosine decay."""
    min_lr: float = 0.0
    """Floor of the cosine schedule, which decays per step (Hu et al.'s code: 1e-4)."""
    clip_grad: float = 1.0
    """Clip the global gradient norm to this value (Hu et al. 2024 recipe: 1.0; 0 disables)."""

    def __post_init__(self) -> None:
        check_positive("epochs", self.epochs)
        check_max("epochs", self.epochs, MAX_EPOCHS, "the paper trains 40")
        check_positive("batch_size", self.batch_size)
        check_max("batch_size", self.batch_size, MAX_BATCH, "a batch is held in memory at once")
        check_positive("lr", self.lr)
        check_choice("optimizer", self.optimizer, ("sgd", "adamw"))
        check_range("momentum", self.momentum, 0.0, 1.0)
        check_positive("weight_decay", self.weight_decay, allow_zero=True)
        check_choice("weight_decay_scope", self.weight_decay_scope, WEIGHT_DECAY_SCOPES)
        check_positive("warmup_epochs", self.warmup_epochs, allow_zero=True)
        check_positive("min_lr", self.min_lr, allow_zero=True)
        check_positive("clip_grad", self.clip_grad, allow_zero=True)
        if self.warmup_epochs > self.epochs:
            raise ConfigError("warmup_epochs", f"{self.warmup_epochs} exceeds epochs {self.epochs}")
        if self.min_lr > self.lr:
            raise ConfigError("min_lr", f"{self.min_lr} exceeds lr {self.lr}")

    def lr_at(self, step: int, steps_per_epoch: int) -> float:
        """Linear warmup then cosine decay to min_lr, as a function of the global step."""
        total = self.epochs * steps_per_epoch
        warm = int(round(self.warmup_epochs * steps_per_epoch))
        if step < warm:
            return self.lr * (step + 1) / warm
        t = (step - warm) / max(1, total - warm)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * min(t, 1.0)))


def cuda_index(device: str) -> Optional[int]:
    """N of a ``device`` setting ``cuda:N``; None for ``auto``, ``cpu`` and ``cuda``.

    The one home of the setting's grammar: anything else raises ConfigError('device').
    """
    if device in ("auto", "cpu", "cuda"):
        return None
    index = device.partition(":")[2] if device.startswith("cuda:") else ""
    if not index.isdigit():
        raise ConfigError("device", f"must be auto, cpu, cuda or cuda:N, got {show(device)}")
    return int(index)


@dataclass
class RunConfig:
    """How the trial runs: seed, device, precision, compilation, checkpoints."""

    seed: int = 0
    """Seed of initialisation, batch order and augmentation."""
    device: str = "auto"
    """'auto' (CUDA if present; in a sweep only if Ray assigned the trial a GPU), 'cpu', 'cuda'
    or 'cuda:N' (fails with the reason where CUDA is not visible: lipsweep.trial.device)."""
    precision: str = "auto"
    """'auto' (bf16 autocast on CUDA, fp32 on CPU), 'bf16' or 'fp32' for training."""
    compile: Union[bool, str] = "auto"
    """Train through torch.compile: true, false or 'auto' (on CUDA only, where an H100
    measured every regularizer's compiled bf16 step 1.27-1.31x faster than eager, with no
    graph break and 2-25 s of compilation: docs/benchmarks.md, "GPU figures")."""
    keep_checkpoints: int = 2
    """How many epoch checkpoints to keep (>= 2 so a corrupt latest has a fallback)."""
    checkpoint_every: int = 1
    """Checkpoint every this many epochs (the last epoch always is); a resumed trial repeats
    the epochs after its last checkpoint."""
    nonfinite_check_every: int = 50
    """Steps between the checks for a non-finite loss (the train loop's only host sync);
    also checked at every epoch end, so a non-finite epoch is never checkpointed."""
    evaluate: bool = True
    """Run the robustness suite and Lipschitz estimates after training."""

    def compiles_on(self, device_type: str) -> bool:
        """Whether training runs through torch.compile on a device of this type."""
        return self.compile is True or (self.compile == "auto" and device_type == "cuda")

    def __post_init__(self) -> None:
        check_positive("seed", self.seed, allow_zero=True)
        cuda_index(self.device)
        check_choice("precision", self.precision, ("auto", "bf16", "fp32"))
        if not isinstance(self.compile, bool) and self.compile != "auto":
            raise ConfigError("compile", f"must be true, false or 'auto', got {show(self.compile)}")
        check_positive("keep_checkpoints", self.keep_checkpoints)
        check_positive("checkpoint_every", self.checkpoint_every)
        check_positive("nonfinite_check_every", self.nonfinite_check_every)
        if self.keep_checkpoints < 2:
            raise ConfigError(
                "keep_checkpoints",
                "must be >= 2 so that a corrupt latest "
                "checkpoint can fall back to the previous one",
            )


_MAX_PROBE_EVERY = (MAX_EPOCHS, f"the number of epochs is at most {MAX_EPOCHS:,}")
_MAX_PROBE_IMAGES = (1_000_000, "more than any evaluation set (CIFAR test: 10,000)")


@dataclass(frozen=True)
class ProbeConfig:
    """Per-epoch robustness probes (trial/probes.py): how often, on how many held-out images.

    Every ``probe_every`` epochs a trial measures cheap proxies of its final robustness metrics
    on one fixed probe subset of its held-out evaluation images (the same images for every
    trial and epoch): PGD accuracy at each ``pgd_eps`` with the suite's PGD settings, on
    ``probe_images`` images, and the median of ||J_f(x)||_2 on the first ``probe_lip_images``
    of them (cost: docs/benchmarks.md, "Per-epoch robustness probes")."""

    probe_every: int = 0
    """Probe after every this-many epochs (and never when 0, the default): metrics
    ``probe_acc_pgd_<eps>`` and ``probe_lip_jacobian_median``, logged to MLflow per epoch and
    usable as a scheduler metric. At 256/64 images, 5.6 % of a paper-recipe epoch's passes
    counted, 24-29 % of its time measured on an H100/H200 (bf16 training against fp32 probes),
    14 % of a 4,608-image CPU epoch (docs/benchmarks.md, "Per-epoch robustness probes")."""
    probe_images: int = 256
    """Held-out images of the PGD probe (a fixed, seeded subset of the evaluation subset,
    independent of the trial seed; all of it when smaller; 0 skips the PGD probe)."""
    probe_lip_images: int = 64
    """The first this-many probe images get the ||J_f(x)||_2 probe (0 skips it)."""

    def __post_init__(self) -> None:
        check_int("probe_every", self.probe_every, 0)
        check_max("probe_every", self.probe_every, *_MAX_PROBE_EVERY)
        for name in ("probe_images", "probe_lip_images"):
            check_int(name, getattr(self, name), 0)
            check_max(name, getattr(self, name), *_MAX_PROBE_IMAGES)
        if self.probe_every and not (self.probe_images or self.probe_lip_images):
            raise ConfigError(
                "probe_images",
                "and probe_lip_images are both 0, so probe_every has nothing to measure; "
                "give one of them images or set probe_every: 0",
            )

    @property
    def enabled(self) -> bool:
        """Whether the trial probes at all."""
        return self.probe_every > 0

    def due(self, epoch: int) -> bool:
        """Whether epoch ``epoch`` (1-based) is probed."""
        return self.enabled and epoch % self.probe_every == 0


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "regularizer": RegularizerConfig,
    "robustness": RobustnessConfig,
    "lipschitz": LipschitzConfig,
    "probe": ProbeConfig,
    "run": RunConfig,
}


def section_keys(cls: type) -> tuple[str, ...]:
    """The flat keys of a section: its fields, or ``cls.flat_keys()`` where they follow a
    family (the regularizer section: ``regularizer`` plus every member's settings)."""
    keys = getattr(cls, "flat_keys", None)
    return tuple(keys()) if keys is not None else tuple(f.name for f in dataclasses.fields(cls))


def _section_fields() -> dict[str, str]:
    owner: dict[str, str] = {}
    for sec, cls in SECTIONS.items():
        for name in section_keys(cls):
            if name in owner:  # pragma: no cover - a programming error, caught by tests
                raise RuntimeError(f"field {name} is in both {owner[name]} and {sec}")
            owner[name] = sec
    return owner


class _FieldSections(Mapping[str, str]):
    """Flat key -> section, read from the sections on each use (a family that gains a
    member gains keys: no listener, no cache to keep in step)."""

    def __getitem__(self, key: str) -> str:
        return _section_fields()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(_section_fields())

    def __len__(self) -> int:
        return len(_section_fields())

    def __contains__(self, key: object) -> bool:
        return key in _section_fields()


FIELD_SECTION: Mapping[str, str] = _FieldSections()


@dataclass
class TrialConfig:
    """One trial: every setting, validated, serialisable to one flat dict."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    regularizer: RegularizerConfig = field(default_factory=RegularizerConfig)
    robustness: RobustnessConfig = field(default_factory=RobustnessConfig)
    lipschitz: LipschitzConfig = field(default_factory=LipschitzConfig)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        self._check_classes()
        if self.model.img_size != self.data.image_size:
            raise ConfigError(
                "img_size",
                f"{self.model.img_size} does not match the "
                f"{self.data.image_size}x{self.data.image_size} images of "
                f"dataset {self.data.dataset!r}",
            )
        self.regularizer.check_tokens(self.model.num_tokens)
        norm = self.model.normalization
        if norm != "pretrained" and self.data.stats is not None and norm != self.data.dataset:
            raise ConfigError(
                "normalization",
                f"{norm!r} mean/std with dataset "
                f"{self.data.dataset!r}; use normalization: {self.data.dataset}",
            )

    def _check_classes(self) -> None:
        """CIFAR fixes the class count; an npz or image folder takes an explicit num_classes
        when every label is below it, else the count its labels give. At least 2 classes."""
        n, src = self.model.num_classes, self.data.source
        if src is None and n != self.data.num_classes:
            raise ConfigError(
                "num_classes",
                f"{n} does not match dataset {self.data.dataset!r} "
                f"({self.data.num_classes} classes)",
            )
        inferred = src is not None and n == src.num_classes
        if src is not None and src.max_label >= n:
            if inferred:  # the data's own count: name the data (as the source check does)
                from lipsweep.data.sources import label_range_problem

                raise ConfigError(
                    "data_dir",
                    f"{self.data.data_dir}: "
                    + label_range_problem(src.max_label, n, src.classes_from),
                )
            raise ConfigError(
                "num_classes",
                f"{n}, but {self.data.data_dir} has label {src.max_label}; every label must "
                "be below num_classes",
            )
        if n < 2:
            where = f"{self.data.data_dir}: {src.classes_from} give" if inferred else "got"
            raise ConfigError(
                "data_dir" if inferred else "num_classes",
                f"{where} {n} class; a classifier needs at least 2 (its evaluation compares "
                "the true class's logit with the others)",
            )

    def probe_metric_names(self) -> tuple[str, ...]:
        """The per-epoch probe metrics this trial reports (none with probes off)."""
        if not self.probe.enabled:
            return ()
        from lipsweep.attacks._registry import attack_vocab

        eps = self.robustness.pgd_eps if self.probe.probe_images else ()
        return probe_metrics(
            attack_vocab("pgd").metric_prefix, eps, jacobian=self.probe.probe_lip_images > 0
        )

    def epoch_metric_names(self) -> tuple[str, ...]:
        """Every metric reported after each epoch (or each probed epoch): what a scheduler may
        compare trials by."""
        return EPOCH_METRICS + self.probe_metric_names()

    def to_flat(self) -> dict[str, Any]:
        """One flat dict of JSON scalars/lists; fields that do not apply (None) are left out."""
        flat: dict[str, Any] = {}
        for sec in SECTIONS:
            part = getattr(self, sec)
            values = part.to_flat() if hasattr(part, "flat_keys") else dataclasses.asdict(part)
            for k, v in values.items():
                if v is not None:
                    flat[k] = list(v) if isinstance(v, tuple) else v
        return flat

    @classmethod
    def from_flat(cls, values: Mapping[str, Any], source: Optional[str] = None) -> "TrialConfig":
        """Inverse of :meth:`to_flat`. Unknown keys and bad values raise ConfigError."""
        try:
            owner = _section_fields()
            unknown = sorted((k for k in values if k not in owner), key=str)
            if unknown:
                raise ConfigError(
                    key_name(unknown[0]), "unknown setting" + _suggest(str(unknown[0]))
                )
            parts: dict[str, dict[str, Any]] = {sec: {} for sec in SECTIONS}
            for k, v in values.items():
                parts[owner[k]][k] = v
            built = {sec: _build(SECTIONS[sec], parts[sec]) for sec in SECTIONS}
            if "num_classes" not in values:  # follows the data (npz/imagefolder: any number)
                built["model"] = dataclasses.replace(
                    built["model"], num_classes=built["data"].num_classes
                )
            return cls(**built)
        except ConfigError as err:
            raise (err.with_source(source) if source else err) from None

    @classmethod
    def from_yaml(
        cls, path: str | Path, overrides: Optional[Mapping[str, Any]] = None
    ) -> "TrialConfig":
        """Load a flat YAML mapping of settings (plus CLI overrides) and validate it."""
        values = load_yaml_mapping(path)
        values.update(overrides or {})
        return cls.from_flat(values, source=str(path))

    def to_json(self) -> str:
        return json.dumps(self.to_flat(), indent=2, sort_keys=True)


def _build(cls: type, values: Mapping[str, Any]) -> Any:
    return cls.from_flat(values) if hasattr(cls, "flat_keys") else from_mapping(cls, values)  # type: ignore[attr-defined]


def _close_settings(name: str) -> list[str]:
    import difflib

    return difflib.get_close_matches(name, list(FIELD_SECTION), n=3)


def _suggest(name: str) -> str:
    close = _close_settings(name)
    return (
        f"; did you mean {', '.join(close)}?"
        if close
        else "; see `lipsweep train --help-settings` for the list"
    )


def check_setting_key(key: Any, where: str, source: str) -> None:
    """ConfigError naming ``<where>.<key>`` (read from ``source``) unless ``key`` is a flat
    trial setting; the closest setting names are suggested."""
    if key not in FIELD_SECTION:
        close = _close_settings(str(key))
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"{where}.{key_name(key)}", f"unknown trial setting{hint}", source)


def load_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML file whose top level is a mapping; errors name the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("config", f"no such file: {p}")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
        if len(raw) > MAX_YAML_BYTES:
            raise YamlRefused(
                f"larger than the {MAX_YAML_BYTES:,} bytes allowed for a config or search space"
            )
        data = load_yaml_text(raw.decode("utf-8"))  # no aliases, no duplicate keys
    except OSError as exc:
        raise ConfigError("config", f"cannot read: {exc.strerror}", str(p)) from None
    except YamlRefused as exc:
        raise ConfigError("config", str(exc), str(p)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            "config", f"not UTF-8 text ({exc.reason} at byte {exc.start})", str(p)
        ) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:  # ValueError: e.g. an int
        # literal past Python's digit limit; RecursionError: absurdly deep nesting
        raise ConfigError("config", f"not valid YAML: {exc}".replace("\n", " "), str(p)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("config", "top level must be a mapping of settings", str(p))
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """'key=value' from the command line, the value parsed as YAML (so 1e-2, true, [2,4] work)."""
    if "=" not in text:
        raise ConfigError("overrides", f"expected key=value, got {show(text)}")
    key, raw = text.split("=", 1)
    try:
        value = load_yaml_text(raw)
    except YamlRefused as exc:  # an alias or a duplicate key: refused, never expanded
        raise ConfigError(key_name(key.strip()), f"--set value refused: {exc}") from None
    except (yaml.YAMLError, ValueError, RecursionError):  # not YAML: keep the text
        value = raw
    return key.strip(), value


def settings_help() -> str:
    """Every setting with its section, default and docstring (for --help-settings)."""
    from lipsweep.core.field_docs import field_docs

    lines = []
    for sec, cls in SECTIONS.items():
        lines.append(f"[{sec}]")
        docs = field_docs(cls)
        declared = getattr(cls, "flat_defaults", None)
        defaults = (
            declared()
            if declared is not None
            else {
                f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(cls)
            }
        )
        for name, default in defaults.items():
            lines.append(f"  {name} = {default!r}\n      {docs.get(name, '')}")
    return "\n".join(lines)
