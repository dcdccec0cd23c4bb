"""The interface every regularizer implements, and the ``none`` regularizer (the baseline).

The trainer uses a regularizer like this (paper eq. 8-9 and Hu et al.; docs/science.md
§1.2-1.3: the regularizer returns its value, the trial applies lambda)::

    reg = create_regularizer_from_config(cfg)  # the class built from cfg.settings
    reg.attach(model)                          # once, after the model is built
    logits = model(x)                          # a training forward
    terms = reg.terms()                        # unweighted scalar terms, e.g. {'jasmin': t}
    loss_reg = sum(reg.weights[n] * t for n, t in terms.items())
    loss = F.cross_entropy(logits, y) + loss_reg
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from lipsweep.regularizers import _registry
from lipsweep.regularizers._registry import register_regularizer


class Regularizer:
    """Base class: a penalty on a ViT's attention, reported as named unweighted terms.

    Subclasses are added with ``@register_regularizer(name)`` (the registry key and the
    ``regularizer`` config value). Their one constructor argument is their settings, the
    frozen dataclass of their torch-free :class:`~lipsweep.regularizers.spec.RegularizerSpec`
    (:mod:`._registry` for the built-ins), validated by the dataclass alone.
    """

    name: ClassVar[str]

    def __init__(self, settings: Any = None) -> None:
        cls = _registry.REGULARIZERS.entry(self.name).settings
        settings = cls() if settings is None else settings
        if not isinstance(settings, cls):
            raise TypeError(
                f"{type(self).__name__} takes its {cls.__name__}, got {type(settings).__name__}"
            )
        self.settings = settings

    def attach(self, model: nn.Module) -> None:
        """Install what the regularizer needs on ``model`` (called once, model built)."""

    def detach(self) -> None:
        """Remove everything :meth:`attach` installed."""

    def terms(self) -> dict[str, torch.Tensor]:
        """Unweighted scalar terms for the most recent training forward ({} if it has none)."""
        return {}

    @property
    def weights(self) -> dict[str, float]:
        """The lambda of each term name returned by :meth:`terms`."""
        return {}

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Persistent state to checkpoint with the model (empty if stateless)."""
        return {}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`state_dict`; the regularizer must be attached first if stateful."""
        if state:
            raise ValueError(f"regularizer {self.name!r} has no state, got keys {sorted(state)}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weights={self.weights})"


@register_regularizer("none")
class NoRegularizer(Regularizer):
    """The baseline: no penalty, no hooks, timm's fused attention path untouched."""
