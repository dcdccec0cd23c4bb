"""Settings of the per-epoch robustness probes (torch-free).

Every ``probe_every`` epochs a trial measures cheap proxies of its final robustness metrics on
one fixed probe subset of its held-out evaluation images (the same images for every trial and
epoch): PGD accuracy at each ``pgd_eps`` with the suite's PGD settings, on ``probe_images``
images, and the median of ||J_f(x)||_2 on the first ``probe_lip_images`` of them
(lipsweep/trial/probes.py; cost: docs/benchmarks.md, "Per-epoch robustness probes").
"""

from __future__ import annotations

from dataclasses import dataclass

from lipsweep.core.config_base import ConfigError, check_int, check_max

_MAX_EVERY = (10_000, "the number of epochs is at most 10,000")
_MAX_IMAGES = (1_000_000, "more than any evaluation set (CIFAR test: 10,000)")


@dataclass(frozen=True)
class ProbeConfig:
    """Per-epoch robustness probes: how often, on how many held-out images."""

    probe_every: int = 0
    """Probe after every this-many epochs (and never when 0, the default): metrics
    ``probe_acc_pgd_<eps>`` and ``probe_lip_jacobian_median``, logged to MLflow per epoch and
    usable as a scheduler metric. At 256/64 images it costs about 5 % of a paper-recipe epoch,
    but more than a whole epoch of the 2,000-image embedded sample (docs/benchmarks.md)."""
    probe_images: int = 256
    """Held-out images of the PGD probe (a fixed, seeded subset of the evaluation subset,
    independent of the trial seed; all of it when smaller; 0 skips the PGD probe)."""
    probe_lip_images: int = 64
    """The first this-many probe images get the ||J_f(x)||_2 probe (0 skips it)."""

    def __post_init__(self) -> None:
        check_int("probe_every", self.probe_every, 0)
        check_max("probe_every", self.probe_every, *_MAX_EVERY)
        for name in ("probe_images", "probe_lip_images"):
            check_int(name, getattr(self, name), 0)
            check_max(name, getattr(self, name), *_MAX_IMAGES)
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
