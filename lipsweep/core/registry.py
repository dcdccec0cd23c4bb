"""One registry shape for every family that grows: regularizers, attacks, Lipschitz estimators.

timm-style: a family module keeps one :class:`Registry`, a decorator adds members, and
``create_*``/``list_*`` read it. Each family keeps its own public names and errors (for example
an unknown regularizer is a ``ConfigError`` naming the ``regularizer`` field).
"""

from __future__ import annotations

import fnmatch
from typing import Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Named members of one family (classes or factories), kept in registration order."""

    def __init__(
        self, kind: str, unknown: Optional[Callable[[str, list[str]], Exception]] = None
    ) -> None:
        self.kind = kind
        self._members: dict[str, T] = {}
        self._unknown = unknown or (
            lambda name, known: ValueError(f"unknown {kind} {name!r}; known {kind}s are {known}")
        )

    def add(self, name: str, member: T) -> T:
        """Register ``member`` under ``name``; re-registering the same object is a no-op."""
        old = self._members.get(name)
        if old is not None and old is not member:
            raise ValueError(
                f"{self.kind} {name!r} is already registered by "
                f"{getattr(old, '__qualname__', old)!s}"
            )
        self._members[name] = member
        return member

    def remove(self, name: str) -> T:
        """Unregister ``name`` (for tests that register a temporary member)."""
        return self._members.pop(name)

    def members(self) -> list[T]:
        """The members in registration order."""
        return list(self._members.values())

    def names(self, filter: str = "") -> list[str]:
        """Sorted names, optionally those matching the fnmatch pattern ``filter``."""
        names = sorted(self._members)
        return [n for n in names if fnmatch.fnmatch(n, filter)] if filter else names

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._members

    def get(self, name: str) -> T:
        """The member registered under ``name``; the family's error naming the known ones."""
        if name not in self:
            raise self._unknown(name, self.names())
        return self._members[name]
