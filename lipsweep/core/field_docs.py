"""Field docstrings of config dataclasses (the string literal under each field), for CLI help.

Like litgpt, each config field carries its own docstring; this reads them back from the source
with ``ast`` so that ``--help-settings`` and the docs never drift from the code.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import lru_cache


def field_docs(cls: type) -> dict[str, str]:
    """Map field name -> its doc: ``cls.__field_docs__()`` where a class declares its fields
    elsewhere (the regularizer section), else the docstring right below each field; a field
    whose metadata names ``doc_from`` (``(owner, name)``) has that field's doc."""
    declared = getattr(cls, "__field_docs__", None)
    docs = dict(declared() if callable(declared) else _source_field_docs(cls))
    for f in getattr(cls, "__dataclass_fields__", {}).values():
        owner = f.metadata.get("doc_from")  # declared in another dataclass (settings_field)
        if owner is not None:
            docs[f.name] = field_docs(owner[0]).get(owner[1], "")
    return docs


@lru_cache(maxsize=None)
def _source_field_docs(cls: type) -> dict[str, str]:
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs
