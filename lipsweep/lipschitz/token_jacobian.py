"""Token-embedding Jacobian ||d f / d T||_2 of every sample (paper Fig. 4).

The paper (Sec. 5, "Details") measures its Fig. 4 distribution this way: "We remove
patch embedding layer from the model and compute Jacobian norm for the rest of the model, as
[the regularizer] does not regularize positional embeddings and a convolutional layer", by power
iteration over the evaluation set. Here T (N x D per image) is the token sequence that enters
the first transformer block: the patch embedding of the pixels, with the CLS token prepended
and the position embedding added (timm's ``_pos_embed``, then ``patch_drop``/``norm_pre``,
identities for ViT-B in eval mode), and f the logits of the rest of the network.

Where along the embedding T is taken barely matters: adding the position embedding is a
translation, so the Jacobian with respect to the patch tokens is the same before and after
it. What matters is that every one of the N = 65 tokens, CLS included, is a variable: the
blocks see the whole sequence, and the attention bounds (Thm 1-3) are stated for it. The pixel
Jacobian (:mod:`lipsweep.lipschitz.jacobian`, ``lip_jacobian_*``) is ||J_T|| composed with the
patch embedding and normalisation; the paper does not plot it.

Mechanism: a forward pre-hook on the network's ``blocks`` replaces their input by T, so the
model's own forward (pooling, head) runs unchanged and the routes of
:func:`~lipsweep.lipschitz.jacobian.jacobian_norm_result` (exact, Lanczos, power) apply as they
are, with T in place of the pixels.

Example::

    >>> res = token_jacobian_norm_result(model, x, 100)     # x: (B, 3, 32, 32) in [0, 1]
    >>> res.values.shape
    torch.Size([B])
"""

from __future__ import annotations

import torch
from torch import nn

from lipsweep.lipschitz.jacobian import (
    DEFAULT_TOL,
    JacobianNormResult,
    jacobian_norm_result,
    measurement_mode,
)


def token_blocks(model: nn.Module) -> nn.Module:
    """The ``blocks`` container of a timm ViT (wrapped or not): its input is T."""
    for name, module in model.named_modules():
        if name.split(".")[-1] == "blocks":
            return module
    raise ValueError(
        f"{type(model).__name__} has no `blocks` module; the token Jacobian needs "
        "a timm VisionTransformer (optionally inside PixelModel)"
    )


def token_embeddings(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """T: the (B, N, D) tokens the first block receives for images ``x`` (eval mode)."""
    captured: list[torch.Tensor] = []

    def grab(_module: nn.Module, args: tuple) -> None:
        captured.append(args[0].detach())

    handle = token_blocks(model).register_forward_pre_hook(grab)
    try:
        with measurement_mode(model), torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return captured[0]


class TokenModel(nn.Module):
    """The logits as a function of T (Shape: (B, N, D) -> (B, C)), for any batch size B.

    The network runs on a stand-in image batch (``x``'s first image, repeated B times) whose
    pixels never reach the blocks: their input is replaced by the argument.
    """

    def __init__(self, model: nn.Module, x: torch.Tensor) -> None:
        super().__init__()
        self.model = model
        self.blocks = token_blocks(model)
        self.image = x[:1].detach()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        def swap(_module: nn.Module, args: tuple) -> tuple:
            return (tokens,) + tuple(args[1:])

        handle = self.blocks.register_forward_pre_hook(swap)
        try:
            return self.model(self.image.expand(tokens.shape[0], *self.image.shape[1:]))
        finally:
            handle.remove()


def token_jacobian_norm_result(
    model: nn.Module,
    x: torch.Tensor,
    iters: int,
    *,
    route: str = "auto",
    tol: float = DEFAULT_TOL,
    precision: str = "auto",
) -> JacobianNormResult:
    """||d f(T) / d T||_2 per image of ``x`` (B, 3, H, W), T the tokens entering the first
    block (paper Fig. 4); routes and precision as
    :func:`~lipsweep.lipschitz.jacobian.jacobian_norm_result`."""
    tokens = token_embeddings(model, x)  # (B, N, D)
    return jacobian_norm_result(
        TokenModel(model, x), tokens, iters, route=route, tol=tol, precision=precision
    )


def token_jacobian_spectral_norm(
    model: nn.Module,
    x: torch.Tensor,
    iters: int = 100,
    *,
    route: str = "auto",
    tol: float = DEFAULT_TOL,
) -> torch.Tensor:
    """One value per image: shape (B,). See :func:`token_jacobian_norm_result`."""
    return token_jacobian_norm_result(model, x, iters, route=route, tol=tol).values
