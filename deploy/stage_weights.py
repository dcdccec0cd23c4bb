"""Stage a timm ViT's pretrained weights once, for workers without network access.

With ``pretrained: hub`` every trial downloads its weights from the Hugging Face hub when it
builds its model. On a machine with network access, run once:

    python deploy/stage_weights.py vit_base_patch16_224.orig_in21k_ft_in1k \\
        ~/lipsweep-weights/vit_b16_orig_in21k_ft_in1k.safetensors

It writes the weights as safetensors and prints the two lines to put in a space's ``fixed:``
(``pretrained:`` the path every node sees, ``pretrained_sha256:`` its checksum, which a trial
checks before it loads the file). Put the file at that path on every node: ``ray_cluster.yaml``'s
``file_mounts`` copies it there, or a shared file system (deploy/README.md, "Pretrained weights").
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from pathlib import Path
from typing import Optional

import torch

_log = logging.getLogger("stage_weights")


def stage(net: torch.nn.Module, out: Path) -> str:
    """Write ``net``'s weights to ``out`` (safetensors); return the file's sha256."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp))
    tmp.replace(out)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", help="timm name with its pretrained tag, as the space's `model:`")
    p.add_argument("out", type=Path, help="the .safetensors file to write")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.out.suffix != ".safetensors":
        print("stage_weights.py: error: out: must end in .safetensors", file=sys.stderr)
        return 2
    import timm

    net = timm.create_model(args.model, pretrained=True)  # the one download from the hub
    sha = stage(net, args.out)
    _log.info("pretrained: %s\npretrained_sha256: %s", args.out.resolve(), sha)
    return 0


if __name__ == "__main__":
    sys.exit(main())
