"""``lipsweep confirm --ray-address``: standard AutoAttack of each run as a Ray task on a cluster.

The evaluation itself is :func:`lipsweep.decide.confirm.evaluate_standard`; this module only
runs it on Ray (Ray is imported only by the modules that run it: docs/architecture.md).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Iterator, Optional

from lipsweep.decide.confirm import ConfirmJob, ConfirmOutcome, evaluate_standard

_log = logging.getLogger("lipsweep.confirm")


def _evaluate_task(*args: Any, **kwargs: Any) -> ConfirmOutcome:
    """:func:`evaluate_standard` in a Ray worker, its progress lines on the worker's stderr
    (which Ray forwards to the driver's console; a worker has no logging set up).

    The device is decided as a trial's (:func:`lipsweep.trial.device.decide_device`): a task
    Ray gave a GPU that cannot see CUDA fails at once with the reason, never falling back to
    days of standard AutoAttack on the worker's CPU.
    """
    import ray

    from lipsweep.sweep.signals import quiet_worker_exit
    from lipsweep.trial.device import choose_device

    quiet_worker_exit()
    gpus = [str(g) for g in ray.get_gpu_ids()]
    device = choose_device("auto", gpus, level=logging.WARNING, work="standard AutoAttack")
    logger = logging.getLogger("lipsweep.confirm")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
        )
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return evaluate_standard(*args, device=device, **kwargs)


def run_ray(
    tracker, jobs: list[ConfirmJob], images: int, iters: Optional[int], address: str
) -> Iterator[tuple[ConfirmJob, Optional[ConfirmOutcome], Optional[BaseException]]]:
    """Evaluate each job as a Ray task on the cluster at ``address``; yields as they end."""
    import ray

    from lipsweep.core.config_base import UsageError
    from lipsweep.decide.sweep_runs import download_checkpoint

    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError) as exc:
        raise UsageError(
            f"--ray-address {address}: cannot join that Ray cluster "
            f"({str(exc).splitlines()[0][:160]});"
            " check the address, and for a cluster with token auth set RAY_AUTH_MODE=token"
            " and RAY_AUTH_TOKEN (`ray get-auth-token` on its head)"
        ) from None
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        task = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1)(_evaluate_task)
        _log.info(
            "confirm on Ray at %s: %d tasks, one %s each",
            address,
            len(jobs),
            "GPU" if gpus else "CPU",
        )
        refs = {}
        for job in jobs:
            try:
                flat, weights = download_checkpoint(tracker, job.run_id)
            except Exception as exc:  # noqa: BLE001
                yield job, None, exc
                continue
            ref = task.remote(
                flat, ray.put(weights), job.eps, images, iters, label=job.label, run_id=job.run_id
            )
            refs[ref] = job
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            try:
                yield refs[ready[0]], ray.get(ready[0]), None
            except Exception as exc:  # noqa: BLE001 - a failed task fails its run only
                yield refs[ready[0]], None, exc
    finally:
        ray.shutdown()
