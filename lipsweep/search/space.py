"""Search-space YAML: what a sweep varies, how it samples, and what each trial may use.

A space file (``search_spaces/*.yaml``) has these top-level keys::

    name: smoke                      # default experiment name
    description: ...                 # free text, shown in --dry-run and MLflow
    fixed: {epochs: 3, ...}          # trial settings shared by every trial (flat TrialConfig keys)
    grid:                            # EITHER an explicit grid: a list of blocks, each the
      - {regularizer: none}          #   cartesian product of its list-valued keys, so
      - regularizer: <reg_a>         #   each regularizer's own settings stay apart
        <a_int>: [0, 10, 30]         #   (`--help-settings` lists every regularizer's
        <a_float>: [1.0e-2, 1.0e-3]  #   settings; search_spaces/ holds real examples)
      - regularizer: <reg_b>         #   a comma-joined key assigns tuples jointly:
        <b_x>,<b_y>: [[1.0e-2, 1.0e-2], [1.0e-2, 0]]
    repeat: {seed: [0, 1, 2]}        # optional: cross every grid point with these settings
    search:                          # OR a sampled search
      algorithm: random              # or an Optuna sampler: optuna, optuna-tpe, optuna-nsga2,
                                     #   ... (lipsweep.search.searchers.list_searchers())
      num_samples: 16
      seed: 0
      metric: acc_pgd_4              # optuna*: one name, or a list for multi-objective
      mode: max                      # or a list matching metric
      space:                         # distributions; a mapping under a regularizer name
        lr: {loguniform: [1.0e-3, 1.0e-1]}   # applies only when that regularizer is drawn
        regularizer: {choice: [<reg_a>, <reg_b>]}
        <reg_a>: {<a_int>: {choice: [0, 10]}, <a_float>: {loguniform: [1.0e-4, 1.0e-2]}}
        <reg_b>: {<b_y>: {loguniform: [1.0e-4, 1.0e-2]}}
    scheduler: {type: asha, metric: acc_clean, mode: max, grace_period: 1, reduction_factor: 2}
                                     # or {type: moasha, metrics: [...], modes: [...], ...}
    resources: {cpu: 1, gpu: 0.5}    # per trial; fractional GPUs pack trials on one GPU;
                                     # accelerator_type: H100 keeps trials on that GPU type
    max_concurrent_trials: 4
    max_failures: 2                  # retries of a trial whose worker died (from checkpoint)
    callbacks:                       # optional: more Ray Tune callbacks, by import path
      - ray.air.integrations.wandb.WandbLoggerCallback: {project: vit-robustness}
      - mypkg.callbacks.Notify       #   a plain path: no keyword arguments
                                     #   (lipsweep/search/callback_refs.py: checked at load
                                     #   without importing them; built when the sweep starts)

In ``grid`` a list is always an axis; to set a list-valued setting (e.g. ``attacks``) inside a
grid block, wrap it in one more list. Every expanded trial is validated as a TrialConfig before
Ray starts, and errors name the file and the key. Nothing here imports Ray.

A ``search.space`` value is a constant (any value that is not a mapping) or one distribution:
``choice: [a, b, ...]``, ``uniform: [low, high]``, ``loguniform: [low, high]``, ``randint:
[low, high]`` (an integer, high excluded) or ``quniform: [low, high, q]`` (``low + i * q``
up to high; q defaults to 1). Any other mapping is refused, naming its key. One parser reads
them for the random sampler and Optuna alike (:mod:`lipsweep.search.space_distributions`).

Metrics: a trial reports ``acc_clean`` and its losses every epoch and the docs/contract.md metrics
(``acc_*``, ``lip_*``, ``epochs_done``) once, at the end. So a scheduler's metrics
(``scheduler.metric`` of ``asha``, ``scheduler.metrics`` of ``moasha``; the scheduler family in
lipsweep/search/schedulers/ parses the block) must be per-epoch metrics
(:data:`lipsweep.core.metric_names.EPOCH_METRICS`) or, where every trial probes
(``probe_every``), among its probe metrics (``probe_acc_pgd_<eps>``,
``probe_lip_jacobian_median``): schedulers compare trials at each rung, while ``search.metric``
may be any final metric: Optuna is told each trial's final report and prunes nothing itself
(:mod:`lipsweep.search.space_checks`).

This module reads the file and its blocks into a :class:`SweepSpec`; a trial's label and the
``--dry-run`` recipe are in :mod:`lipsweep.search.space_display`.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from lipsweep.core.config_base import (
    INT_LIMIT,
    ConfigError,
    finite,
    key_name,
    load_yaml_text,
    show,
)
from lipsweep.regularizers import regularizer_specs
from lipsweep.search.callback_refs import CallbackRef, parse_callbacks
from lipsweep.search.schedulers import scheduler_settings
from lipsweep.search.space_checks import check_metrics, check_scheduler_reach, trial_epochs
from lipsweep.search.space_distributions import SearchSpace, parse_space, sample_space
from lipsweep.settings.config import (
    FIELD_SECTION,
    TrialConfig,
    check_setting_key,
    load_yaml_mapping,
)

SchedulerSettings = Any
"""A scheduler member's frozen settings dataclass (``AshaSettings``, ``MoashaSettings``, ...)."""

TOP_KEYS = {
    "name",
    "description",
    "fixed",
    "grid",
    "repeat",
    "search",
    "scheduler",
    "resources",
    "max_concurrent_trials",
    "max_failures",
    "callbacks",
}
MAX_TRIALS = 100_000  # more is a typo (or a YAML that would exhaust memory while expanding)


@dataclass
class Resources:
    """Per-trial resources requested from Ray."""

    cpu: float = 1.0
    gpu: float = 0.0
    accelerator_type: Optional[str] = None
    """Ray's accelerator type of the GPU a trial runs on (``H100``, ``H200``, ``A10G``): Ray
    places trials only on nodes of that type, and ``--dry-run`` projects the grid's GPU-hours
    on it (:mod:`lipsweep.sweep.projection`). None: any GPU."""


@dataclass
class SearchSpec:
    """A sampled search (``search.algorithm``: random or an Optuna sampler)."""

    algorithm: str
    num_samples: int
    seed: int = 0
    metric: list[str] = field(default_factory=list)
    mode: list[str] = field(default_factory=list)
    space: SearchSpace = field(default_factory=lambda: SearchSpace({}, {}))
    settings: Any = None
    """The searcher's frozen settings (lipsweep.search.searchers)."""

    @property
    def lazy(self) -> bool:
        """Trials are drawn during the sweep (Optuna), not when the space is loaded."""
        from lipsweep.search.searchers import searcher_info

        return searcher_info(self.algorithm).lazy


@dataclass
class SweepSpec:
    """A validated search space."""

    name: str
    path: str
    text: str
    fixed: dict[str, Any]
    trials: list[dict[str, Any]]  # expanded flat configs (grid / random)
    search: Optional[SearchSpec] = None  # set for optuna (trials sampled lazily)
    scheduler: Optional[SchedulerSettings] = None
    """The scheduler member's settings (``.type`` names it: lipsweep/search/schedulers/)."""
    resources: Resources = field(default_factory=Resources)
    max_concurrent_trials: int = 0
    max_failures: int = 2
    description: str = ""
    callbacks: tuple[CallbackRef, ...] = ()
    """Further Ray Tune callbacks (``callbacks:``), located but not imported yet."""
    epochs: int = 40
    """Every trial's epochs, where a scheduler is set (its rungs end there); else the
    ``fixed.epochs`` default."""
    repeats: list[dict[str, Any]] = field(default_factory=lambda: [{}])
    """``repeat:``'s points; a learning searcher runs each draw once per point."""

    @property
    def num_trials(self) -> int:
        if self.search and not self.trials:
            return self.search.num_samples * max(1, len(self.repeats))
        return len(self.trials)


def _err(field_: str, msg: str, path: str) -> ConfigError:
    return ConfigError(field_, msg, path)


def _check_keys(section: str, mapping: Any, allowed: set[str], path: str) -> dict:
    if not isinstance(mapping, dict):
        raise _err(section, "must be a mapping", path)
    unknown = sorted((k for k in mapping if k not in allowed), key=str)
    if unknown:
        name = key_name(unknown[0])
        raise _err(
            f"{section}.{name}" if section else name,
            f"unknown key; allowed: {sorted(allowed)}",
            path,
        )
    return mapping


def expand_block(block: dict[str, Any], where: str, path: str) -> list[dict[str, Any]]:
    """Cartesian product of one grid block's list-valued keys (comma keys assign jointly)."""
    axes: list[list[dict[str, Any]]] = []
    for key, value in block.items():
        names = [k.strip() for k in str(key).split(",")]
        for n in names:
            check_setting_key(n, where, path)
        values = value if isinstance(value, list) else [value]
        if not values:
            raise _err(f"{where}.{key}", "an empty list gives no trials", path)
        options = []
        for v in values:
            if len(names) > 1:
                if not isinstance(v, list) or len(v) != len(names):
                    raise _err(
                        f"{where}.{key}",
                        f"each value must be a list of {len(names)} (one per name), got {show(v)}",
                        path,
                    )
                options.append(dict(zip(names, v)))
            else:
                options.append({names[0]: v})
        axes.append(options)
    if math.prod(len(a) for a in axes) > MAX_TRIALS:
        raise _err(where, f"expands to more than {MAX_TRIALS} trials", path)
    return [dict(kv for part in combo for kv in part.items()) for combo in itertools.product(*axes)]


def normalise_trial(flat: dict[str, Any]) -> dict[str, Any]:
    """A trial's settings validated, typed and with every default filled in: what its
    ``config.json`` holds, and its MLflow params, whichever searcher drew it."""
    return TrialConfig.from_flat(flat).to_flat()


def _parse_search(raw: Any, path: str) -> SearchSpec:
    """The ``search:`` block through the searcher family (lipsweep/search/searchers): the
    algorithm's settings dataclass validates its keys; errors name ``search.<key>``."""
    from lipsweep.search import searchers

    raw = _check_keys("search", raw, searchers.all_settings_keys(), path)
    algo = raw.get("algorithm")
    try:
        if not searchers.searcher_info(algo).sampled:
            raise _err(
                "search.algorithm",
                f"{algo!r} is spelled as a top-level `grid:` list of blocks, not a search",
                path,
            )
        _check_keys("search", raw, searchers.settings_keys(algo), path)
        values = {k: v for k, v in raw.items() if k not in ("algorithm", "space")}
        settings = searchers.searcher_settings(algo, values)
    except ConfigError as err:
        raise err.with_source(path) from None
    return SearchSpec(
        algo,
        settings.num_samples,
        settings.seed,
        list(settings.metric),
        list(settings.mode),
        parse_space(raw.get("space"), path),
        settings,
    )


def _parse_scheduler(raw: Any, path: str) -> SchedulerSettings:
    """``scheduler: {type: NAME, ...}`` through the scheduler family (unknown type: the known
    ones listed)."""
    try:
        return scheduler_settings(raw)
    except ConfigError as err:
        raise err.with_source(path) from None


def _int_in(val: Any, lo: int, hi: int) -> bool:
    """An integer (not bool) in [lo, hi]."""
    return isinstance(val, int) and not isinstance(val, bool) and lo <= val <= hi


def _parse_resources(raw: Any, path: str) -> Resources:
    raw = _check_keys("resources", raw or {}, {"cpu", "gpu", "accelerator_type"}, path)
    res = Resources(**raw)
    kind = res.accelerator_type
    if kind is not None and not (isinstance(kind, str) and re.fullmatch(r"[A-Za-z0-9_.-]+", kind)):
        raise _err(
            "resources.accelerator_type",
            f"must be a Ray accelerator type such as H100, got {show(kind)}",
            path,
        )
    for key in ("cpu", "gpu"):
        val = getattr(res, key)
        if not finite(val) or val < 0:
            raise _err(f"resources.{key}", f"must be a number >= 0, got {show(val)}", path)
    if res.gpu > 1 and res.gpu != int(res.gpu):
        raise _err("resources.gpu", "fractions are allowed only below 1", path)
    return res


def _validate_trials(trials: list[dict[str, Any]], path: str) -> list[dict[str, Any]]:
    """Validate each trial; return them normalised (typed values, every default filled in)."""
    out = []
    for i, flat in enumerate(trials):
        try:
            out.append(normalise_trial(flat))
        except ConfigError as err:
            label = ", ".join(f"{k}={show(flat[k], 40)}" for k in _label_keys() if k in flat)
            raise ConfigError(err.field, f"{err.message} (trial {i}: {label})", path) from None
    return out


def _label_keys() -> tuple[str, ...]:
    """Keys that name a trial in an error: the regularizer and the first two settings of
    each registered regularizer."""
    return ("regularizer",) + tuple(
        n for spec in regularizer_specs() for n in spec.setting_names[:2]
    )


def load_space(path: str | Path) -> SweepSpec:
    """Parse and fully validate a search-space YAML (no Ray, no MLflow, nothing written)."""
    return space_from_mapping(load_yaml_mapping(path), str(path), Path(path).read_text())


def space_spec(space: "str | Path | Mapping[str, Any] | SweepSpec") -> SweepSpec:
    """A validated space from a YAML path, a mapping of the YAML's keys (its errors name
    ``space``) or a spec already parsed (returned as it is)."""
    if isinstance(space, SweepSpec):
        return space
    if isinstance(space, Mapping):
        try:  # through YAML text: plain values, the size limit, and the text a run logs
            text = yaml.dump(dict(space), Dumper=_PlainDumper, sort_keys=False)
            raw = load_yaml_text(text)
        except (yaml.YAMLError, ValueError, RecursionError) as exc:
            msg = f"not a YAML mapping: {exc}".replace("\n", " ")
            raise ConfigError("space", msg) from None
        return space_from_mapping(raw, "space", text)
    return load_space(space)


class _PlainDumper(yaml.SafeDumper):
    """Safe YAML with no anchors: a value used twice is written twice."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def space_from_mapping(raw: dict[str, Any], p: str, text: str) -> SweepSpec:
    """Validate a space's YAML keys read from ``p`` (an error's source), holding ``text``."""
    _check_keys("", raw, TOP_KEYS, p)
    name = raw.get("name", Path(p).stem)
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise _err("name", f"must be letters, digits, - or _, got {show(name)}", p)
    description = raw.get("description", "")
    if not isinstance(description, (str, type(None))):
        raise _err("description", f"must be text, got {show(description)}", p)
    fixed = raw.get("fixed", {}) or {}
    _check_keys("fixed", fixed, set(FIELD_SECTION), p)
    if ("grid" in raw) == ("search" in raw):
        raise _err(
            "grid", "give exactly one of `grid` (explicit trials) or `search` (random/optuna)", p
        )
    repeat = raw.get("repeat", {}) or {}
    if not isinstance(repeat, dict):
        raise _err("repeat", "must be a mapping of setting: [values]", p)
    rep_points = expand_block(repeat, "repeat", p) if repeat else [{}]
    search = None
    trials: list[dict[str, Any]] = []
    draws: list[dict[str, Any]] = []
    if "grid" in raw:
        blocks = raw["grid"]
        if not isinstance(blocks, list) or not blocks:
            raise _err("grid", "must be a non-empty list of blocks", p)
        for bi, block in enumerate(blocks):
            if not isinstance(block, dict):
                raise _err(f"grid[{bi}]", "each block must be a mapping", p)
            points = expand_block(block, f"grid[{bi}]", p)
            if len(trials) + len(points) * len(rep_points) > MAX_TRIALS:
                raise _err("grid", f"expands to more than {MAX_TRIALS} trials", p)
            for point in points:
                for rep in rep_points:
                    trials.append({**fixed, **point, **rep})
    else:
        search = _parse_search(raw["search"], p)
        if not search.lazy:  # random: the draws are made now (--dry-run lists them)
            rng = random.Random(search.seed)
            if search.num_samples * len(rep_points) > MAX_TRIALS:
                raise _err("repeat", f"num_samples x repeat exceeds {MAX_TRIALS} trials", p)
            for _ in range(search.num_samples):
                draw = sample_space(search.space, rng, p)
                for rep in rep_points:
                    trials.append({**fixed, **draw, **rep})
        else:  # an Optuna sampler draws lazily; validate a few draws of the space now
            if any(set(r) - {"seed"} for r in rep_points):
                raise _err(
                    "repeat",
                    f"with {search.algorithm}, repeat may only list seed (each draw runs "
                    "every seed, judged as one configuration)",
                    p,
                )
            if search.num_samples * len(rep_points) > MAX_TRIALS:
                raise _err("repeat", f"num_samples x repeat exceeds {MAX_TRIALS} trials", p)
            rng = random.Random(search.seed)
            draws = _validate_trials(
                [{**fixed, **sample_space(search.space, rng, p)} for _ in range(16)], p
            )
    trials = _validate_trials(trials, p)
    scheduler = _parse_scheduler(raw["scheduler"], p) if raw.get("scheduler") else None
    check_metrics(search, scheduler, trials or draws, p)
    epochs = int(fixed.get("epochs", 40))
    if scheduler is not None:
        epochs = trial_epochs(search, trials or draws, p)
        check_scheduler_reach(scheduler, trials or draws, epochs, p)
    mct = raw.get("max_concurrent_trials", 0)
    mf = raw.get("max_failures", 2)
    for key, val in (("max_concurrent_trials", mct), ("max_failures", mf)):
        if not _int_in(val, 0, INT_LIMIT):
            raise _err(key, f"must be an integer >= 0, got {show(val)}", p)
    return SweepSpec(
        name=name,
        path=p,
        text=text,
        fixed=fixed,
        trials=trials,
        search=search,
        scheduler=scheduler,
        resources=_parse_resources(raw.get("resources"), p),
        max_concurrent_trials=mct,
        max_failures=mf,
        description=description or "",
        callbacks=parse_callbacks(raw.get("callbacks"), p),
        epochs=epochs,
        repeats=rep_points,
    )
