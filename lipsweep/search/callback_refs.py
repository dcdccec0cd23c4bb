"""``callbacks:`` in a space: further Ray Tune callbacks (W&B, Comet, your own), by import path.

A space names each by the dotted path of its class (``module.Class``, or ``module:Class``),
alone or with keyword arguments::

    callbacks:
      - ray.air.integrations.wandb.WandbLoggerCallback: {project: vit-robustness}
      - ray.air.integrations.comet.CometLoggerCallback: {}
      - mypkg.tune_callbacks.Notify          # a plain path: no arguments

Two checks, at two times:

- **At load** (:func:`parse_callbacks`; ``--dry-run`` too), with nothing imported, so that
  neither Ray nor torch nor the callback's own code runs: the module is located by the import
  system's finders, parent packages included, without executing any of them; then the
  module's source is read (``ast``) for a top-level definition of the class name. A module
  with a module-level ``__getattr__`` or a ``*`` import, or one without Python source, is
  trusted for the name until the sweep runs. A module already imported is asked directly.
- **When the sweep starts** (:func:`lipsweep.sweep.user_callbacks.create_callbacks`, before
  Ray or MLflow): each class is imported, must be a ``ray.tune.Callback``, and is built with
  its keyword arguments. Any failure is a :class:`~lipsweep.core.config_base.ConfigError`
  naming ``callbacks[i]``.

They run on the driver after lipsweep's own callbacks (MLflow, progress, heartbeat), and Tune
keeps them with the experiment: the space record (:mod:`lipsweep.search.space_record`) holds
them, so ``--resume`` with another list exits 2. This module imports neither torch nor Ray.
Importing, building and guarding them is the sweep's part
(:mod:`lipsweep.sweep.user_callbacks`).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from dataclasses import dataclass, field
from importlib.machinery import ModuleSpec
from typing import Any, Mapping, Optional

from lipsweep.core.config_base import ConfigError, show


@dataclass(frozen=True)
class CallbackRef:
    """One ``callbacks:`` entry: where its class lives and the keyword arguments it gets."""

    path: str
    """The path as written in the space (``module.Class`` or ``module:Class``)."""
    module: str
    attr: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The entry as the space record keeps it: ``{path: kwargs}``."""
        return {self.path: dict(self.kwargs)}


def _split(path: str) -> tuple[str, str]:
    """``module.Class`` or ``module:Class`` -> (module, Class); empty parts if malformed."""
    module, colon, attr = path.partition(":")
    if not colon:
        module, _, attr = path.rpartition(".")
    parts = module.split(".") if module else []
    if not parts or not all(p.isidentifier() for p in parts) or not attr.isidentifier():
        return "", ""
    return module, attr


def _find(module: str) -> Optional[ModuleSpec]:
    """The spec of ``module``, found by the import system's finders, parents included,
    without importing (so without executing) any of them; None if there is none."""
    if module in sys.modules:
        return getattr(sys.modules[module], "__spec__", None) or ModuleSpec(module, None)
    parts = module.split(".")
    spec = importlib.util.find_spec(parts[0])  # a top-level name: nothing is imported
    for i in range(1, len(parts)):
        locations = spec.submodule_search_locations if spec is not None else None
        if locations is None:
            return None
        name = ".".join(parts[: i + 1])
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, list(locations)) if find is not None else None
            if spec is not None:
                break
    return spec


def _top_level_names(tree: ast.Module) -> Optional[set[str]]:
    """Names a module defines at its top level (inside ``if``/``try`` too); None when it may
    define others at run time (a module ``__getattr__`` or a ``*`` import)."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name == "__getattr__":
                return None
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                todo.extend(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)
    return names


def _defines(spec: ModuleSpec, attr: str) -> bool:
    """Whether the module of ``spec`` has ``attr``, as far as can be told without running it
    (True when it cannot be told: no Python source, a module ``__getattr__``)."""
    mod = sys.modules.get(spec.name)
    if mod is not None:
        return hasattr(mod, attr)
    origin = spec.origin or ""
    if not origin.endswith(".py"):
        return True
    try:
        with open(origin, "rb") as fh:
            names = _top_level_names(ast.parse(fh.read(), origin))
    except (OSError, SyntaxError, ValueError):
        return True  # the import at sweep time says what is wrong with it
    return names is None or attr in names


def _parse_entry(raw: Any, where: str, source: str) -> CallbackRef:
    if isinstance(raw, str):
        path, kwargs = raw, {}
    elif isinstance(raw, dict) and len(raw) == 1 and isinstance(next(iter(raw)), str):
        path, kwargs = next(iter(raw.items()))
        kwargs = {} if kwargs is None else kwargs
    else:
        raise ConfigError(
            where,
            f"must be an import path, or one `path: {{keyword: value}}` mapping, got {show(raw)}",
            source,
        )
    if not isinstance(kwargs, dict) or not all(
        isinstance(k, str) and k.isidentifier() for k in kwargs
    ):
        msg = f"{path}: keyword arguments must be a mapping of names, got {show(kwargs)}"
        raise ConfigError(where, msg, source)
    module, attr = _split(path.strip())
    if not module:
        msg = f"{show(path)} is not an import path like pkg.module.Class"
        raise ConfigError(where, msg, source)
    try:
        spec = _find(module)
    except (ImportError, ValueError) as err:  # a finder refusing the name
        raise ConfigError(where, f"cannot look up module {module!r}: {err}", source) from None
    if spec is None:
        raise ConfigError(
            where, f"no module {module!r} (for {path}); is its package installed?", source
        )
    if not _defines(spec, attr):
        raise ConfigError(where, f"module {module!r} defines no {attr!r} (for {path})", source)
    return CallbackRef(path.strip(), module, attr, kwargs)


def parse_callbacks(raw: Any, source: str) -> tuple[CallbackRef, ...]:
    """The ``callbacks:`` list checked without importing anything (see the module docstring);
    a ConfigError naming ``callbacks[i]`` for an entry that cannot be right."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("callbacks", f"must be a list of import paths, got {show(raw)}", source)
    return tuple(_parse_entry(item, f"callbacks[{i}]", source) for i, item in enumerate(raw))
