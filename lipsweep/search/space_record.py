"""The space a sweep started from, and the one rule for ``--resume`` after the file changed.

A new sweep writes ``<storage>/<experiment>/lipsweep_space.json``: its trial configs (grid and
random draws, normalised) and every setting that Tune keeps from the first start (the search,
the scheduler, resources, ``max_failures``, ``max_concurrent_trials``; ``fixed`` for a search,
whose trials are drawn later; the ``callbacks:`` list, if any, which Tune pickles with the
experiment). ``Tuner.restore`` brings back the trials and the searcher of
that first start, so an edited point would be silently ignored and an added one would never
run. Hence the rule:

    ``--resume`` runs the space the sweep started from. Any difference (a point added, removed
    or changed, or a changed setting) exits 2 before Ray starts, naming what changed.

To run more points, start them as a new sweep (another ``--experiment``). A sweep started
before this record existed resumes unchecked, with a warning. Torch-, Ray- and MLflow-free.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from lipsweep.core.config_base import ConfigError, load_yaml_text
from lipsweep.core.storage import experiment_path, read_text, write_text
from lipsweep.search.space import SweepSpec
from lipsweep.search.space_display import trial_label

_log = logging.getLogger("lipsweep.sweep")

RECORD_FILE = "lipsweep_space.json"
RECORD_VERSION = 1
SHOWN = 4  # changes named in the error line


def record_path(storage: str, experiment: str) -> str:
    return f"{experiment_path(storage, experiment)}/{RECORD_FILE}"


def _plain(value: Any) -> Any:
    """JSON round trip: tuples become lists, keys sorted, as the saved record holds them."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def space_record(spec: SweepSpec) -> dict[str, Any]:
    """What a sweep's trials are made of (see the module docstring)."""
    doc = load_yaml_text(spec.text)
    settings: dict[str, Any] = {
        "search": doc.get("search") if isinstance(doc, dict) else None,
        # {"type": NAME, **its settings}: for asha the keys the record has always held
        "scheduler": {"type": spec.scheduler.type, **asdict(spec.scheduler)}
        if spec.scheduler
        else None,
        "resources": asdict(spec.resources),
        "max_failures": spec.max_failures,
        "max_concurrent_trials": spec.max_concurrent_trials,
    }
    if spec.search is not None:
        settings["fixed"] = spec.fixed
    if spec.callbacks:  # absent when empty: records of sweeps started before still match
        settings["callbacks"] = [ref.record() for ref in spec.callbacks]
    return _plain({"version": RECORD_VERSION, "settings": settings, "trials": spec.trials})


def save_record(spec: SweepSpec, storage: str, experiment: str) -> None:
    write_text(record_path(storage, experiment), json.dumps(space_record(spec), indent=1))


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _diff_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def space_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Every difference between two records, one phrase each (empty: the same space)."""
    changes = []
    old_s, new_s = saved.get("settings", {}), current["settings"]
    for key in _diff_keys(old_s, new_s):
        changes.append(f"{key} changed: {_short(old_s.get(key))} -> {_short(new_s.get(key))}")
    old = list(saved.get("trials", []))
    new = list(current["trials"])
    for t in list(old):  # identical points match each other (as a multiset)
        if t in new:
            new.remove(t)
            old.remove(t)
    for t in old:  # a vanished point: changed if a new one is close to it, else removed
        if new:
            closest = min(new, key=lambda n: len(_diff_keys(t, n)))
            new.remove(closest)
            shown = ", ".join(
                f"{k} {_short(t.get(k))} -> {_short(closest.get(k))}"
                for k in _diff_keys(t, closest)
            )
            changes.append(f"point [{trial_label(t)}] changed: {shown}")
        else:
            changes.append(f"point [{trial_label(t)}] removed")
    changes += [f"point [{trial_label(t)}] added" for t in new]
    return changes


def check_resume_space(spec: SweepSpec, storage: str, experiment: str) -> None:
    """Refuse (ConfigError naming --resume, exit 2) a space that differs from the record."""
    path = record_path(storage, experiment)
    text = read_text(path)
    if text is None:
        _log.warning(
            "%s is missing (a sweep started by an older lipsweep?): cannot check that the "
            "space is unchanged; Tune resumes the trials it started with",
            path,
        )
        return
    try:
        saved = json.loads(text)
        if not isinstance(saved, dict) or not isinstance(saved.get("trials"), list):
            raise ValueError("not a space record")
    except ValueError as err:
        raise ConfigError("--resume", f"{path} is unreadable ({err})") from None
    changes = space_changes(saved, space_record(spec))
    if not changes:
        return
    more = f"; and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
    raise ConfigError(
        "--resume",
        f"the space changed since the sweep started ({path}): "
        + "; ".join(changes[:SHOWN])
        + more
        + ". --resume runs the space the sweep started from: restore it, or run the new "
        "points as another sweep (another --experiment)",
        spec.path,
    )
