"""The options of one sweep: what ``lipsweep sweep``'s flags, :func:`lipsweep.api.sweep`'s
keywords and the driver (:func:`lipsweep.sweep.driver.run_sweep`) all read.

Torch-free, Ray-free and light: ``sweep --dry-run`` builds it without importing torch, Ray
or MLflow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from lipsweep.core.config_base import ConfigError, check_int, show
from lipsweep.core.options import (
    check_bool,
    check_experiment_name,
    check_ray_address,
    check_text,
    cli,
    default_ray_address,
    default_tracking_uri,
    set_field,
)
from lipsweep.core.shipped import SPACES, resolve

if TYPE_CHECKING:
    from lipsweep.search.space import SweepSpec


@dataclass(frozen=True, kw_only=True)
class SweepOptions:
    """``lipsweep sweep SPACE [--experiment NAME] [--storage DIR] [--resume] ...``."""

    space: Union[str, Mapping[str, Any], "SweepSpec"] = field(
        metadata=cli(positional=True, metavar="SPACE")
    )
    """Search-space YAML, or the name of a shipped space (``smoke``; ``lipsweep spaces`` lists
    them), which becomes the path of its installed file. From Python: also a dict of the
    YAML's keys or a parsed ``SweepSpec``, validated as a file is when the sweep starts."""
    experiment: Optional[str] = None
    """MLflow experiment and sweep name (None: the YAML's ``name``)."""
    storage: Optional[str] = None
    """Ray Tune storage: a local folder, NFS or s3:// (None: $LIPSWEEP_STORAGE or
    ./ray_results)."""
    resume: bool = False
    """Continue the interrupted sweep from its storage."""
    max_concurrent_trials: Optional[int] = None
    """Cap on trials running at once (None: the space's)."""
    dry_run: bool = False
    """List the trials and return without starting Ray."""
    ray_address: Optional[str] = field(default_factory=default_ray_address)
    """Connect to this Ray cluster (None: $RAY_ADDRESS, or a local instance)."""
    num_cpus: Optional[int] = None
    """CPUs of a local Ray instance."""
    status_every: float = field(default=30.0, metadata=cli(metavar="SECONDS"))
    """Seconds between status blocks (running/pending/finished, ETA, best trial), which
    also come at each trial's end (0: at trial ends only)."""
    dashboard: bool = False
    """Start the Ray dashboard of a local Ray instance on 127.0.0.1 (its address is
    printed)."""
    tracking_uri: str = field(default_factory=default_tracking_uri)
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, or a SQLite store mlflow.db in
    the working folder)."""

    def __post_init__(self) -> None:
        if isinstance(self.space, Mapping):
            set_field(self, "space", dict(self.space))
        elif type(self.space).__name__ != "SweepSpec":  # the spec's module is not imported yet
            check_text(self, "space", path=True)
            set_field(self, "space", resolve(SPACES, self.space, "space"))
        check_text(self, "experiment", optional=True)
        if self.experiment is not None:
            check_experiment_name(self.experiment)
        check_text(self, "storage", optional=True, path=True)
        for name in ("resume", "dry_run", "dashboard"):
            check_bool(self, name)
        for name in ("max_concurrent_trials", "num_cpus"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        every = self.status_every
        number = isinstance(every, (int, float)) and not isinstance(every, bool)
        if not (number and 0 <= every < math.inf):
            msg = f"must be a number of seconds >= 0, got {show(every)}"
            raise ConfigError("status_every", msg)
        set_field(self, "status_every", float(every))
        check_ray_address(self)
        check_text(self, "tracking_uri")

    def resolved(self, experiment: str, storage: str) -> "SweepOptions":
        """These options with the sweep's experiment and storage decided: what the driver
        runs (:func:`lipsweep.sweep.driver.run_sweep`)."""
        return dataclasses.replace(self, experiment=experiment, storage=storage)
