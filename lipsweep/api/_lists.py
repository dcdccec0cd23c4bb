"""``models``, ``spaces``, ``data prepare`` and the settings help: what the package ships and
knows, and one dataset packed for a cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lipsweep.api.options import DataPrepareOptions
from lipsweep.api.results import PreparedData, ShippedSpace
from lipsweep.core.config_base import ConfigError


def models() -> list[str]:
    """The timm ViT architectures lipsweep can build."""
    from lipsweep.vit.models import list_vit_models

    return list(list_vit_models())


def spaces() -> list[ShippedSpace]:
    """The shipped search spaces, by name."""
    from lipsweep.core.shipped import space_descriptions

    return [ShippedSpace(name, text) for name, text in space_descriptions()]


def settings_help() -> str:
    """Every trial setting with its default and its doc, one block per section."""
    from lipsweep.settings.config import settings_help as text

    return text()


def prepare_data(opts: DataPrepareOptions) -> PreparedData:
    """Pack ``opts.source`` into ``opts.dest``; a bad value names its field."""
    from lipsweep.data.remote import MANIFEST_SUFFIX, prepare

    fields = {f"--{f.name}": f.name for f in dataclasses.fields(DataPrepareOptions)}
    try:
        m = prepare(opts.dataset, Path(opts.source).expanduser(), opts.dest, opts.download)
    except ConfigError as err:  # the data package names its flags
        if err.field in fields:
            raise ConfigError(fields[err.field], err.message, err.source) from None
        raise
    file = f"{opts.dest.rstrip('/')}/{m.file}"
    return PreparedData(
        dataset=m.dataset,
        file=file,
        manifest_file=file + MANIFEST_SUFFIX,
        train=m.train,
        test=m.test,
        bytes=m.bytes,
        sha256=m.sha256,
    )
