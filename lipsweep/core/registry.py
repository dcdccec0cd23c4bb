"""One registry mechanism for every family that grows: regularizers, attacks, Lipschitz
estimators, searchers and schedulers.

timm-style: a family keeps one :class:`Registry`; a decorator (``register_*``) adds a member
from the file that defines it, and ``create_*`` / ``list_*`` read the family. Each family has
its own namespace and its own error for an unknown name (for example an unknown regularizer is
a ``ConfigError`` naming the ``regularizer`` field).

A member carries light facts (``settings``: a frozen dataclass validated in ``__post_init__``;
``info``: names a config or a metric needs) apart from its implementation, so configs validate
without importing torch or Ray. A built-in is *declared* with the import path of its
implementation (``"lipsweep.attacks._pgd:PGD"``), loaded on first :meth:`Registry.load`::

    >>> fam = Registry("widget")
    >>> fam.declare("json", "json:dumps", info={"light": True})
    >>> fam.names(), fam.entry("json").info["light"]
    (['json'], True)
    >>> fam.create("json", [1])
    '[1]'
"""

from __future__ import annotations

import fnmatch
import importlib
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Callable, Generic, Mapping, Optional, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Member(Generic[T]):
    """One member of a family: its name, implementation and light facts."""

    name: str
    impl: Any
    """The class or factory, or ``"module:attr"`` until :meth:`Registry.load` imports it."""
    settings: Optional[type] = None
    """The member's frozen settings dataclass (validated in its ``__post_init__``), if any."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Family-specific facts known without importing the implementation."""

    @property
    def loaded(self) -> bool:
        return not isinstance(self.impl, str)


def _import(path: str) -> Any:
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else ():
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Named members of one family, kept in registration order."""

    def __init__(
        self, kind: str, unknown: Optional[Callable[[str, list[str]], Exception]] = None
    ) -> None:
        self.kind = kind
        self._members: dict[str, Member[T]] = {}
        self._unknown = unknown or (
            lambda name, known: ValueError(f"unknown {kind} {name!r}; known {kind}s are {known}")
        )

    # -- adding and removing -------------------------------------------------------------
    def declare(
        self,
        name: str,
        impl: str,
        *,
        settings: Optional[type] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Declare a member whose implementation ``"module:attr"`` is imported on first use.

        The module registers the same object with :meth:`register` (or not at all): either way
        :meth:`load` returns it.
        """
        if ":" not in impl:
            raise ValueError(f"{self.kind} {name!r}: impl must be 'module:attr', got {impl!r}")
        self._put(Member(name, impl, settings, MappingProxyType(dict(info or {}))))

    def add(
        self,
        name: str,
        obj: T,
        *,
        settings: Optional[type] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> T:
        """Register ``obj`` under ``name``; re-registering the same object is a no-op, and a
        declared member gets its implementation (its declared settings and info stay unless
        given)."""
        old = self._members.get(name)
        if old is not None and old.loaded and old.impl is not obj:
            raise ValueError(
                f"{self.kind} {name!r} is already registered by "
                f"{getattr(old.impl, '__qualname__', old.impl)!s}"
            )
        if old is not None and not old.loaded:
            member = replace(
                old,
                impl=obj,
                settings=settings or old.settings,
                info=MappingProxyType({**old.info, **(info or {})}),
            )
        else:
            member = Member(name, obj, settings, MappingProxyType(dict(info or {})))
        self._members[name] = member
        return obj

    def register(
        self,
        name: Optional[str] = None,
        *,
        settings: Optional[type] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> Callable[[T], T]:
        """Decorator: register a class or factory (under its ``__name__`` if ``name`` is None)."""

        def deco(obj: T) -> T:
            return self.add(name or obj.__name__, obj, settings=settings, info=info)  # type: ignore[attr-defined]

        return deco

    def remove(self, name: str) -> Any:
        """Unregister ``name`` (for tests that register a temporary member)."""
        return self._members.pop(name).impl

    def _put(self, member: Member[T]) -> None:
        old = self._members.get(member.name)
        if old is not None and old.impl != member.impl:
            raise ValueError(f"{self.kind} {member.name!r} is already registered")
        self._members[member.name] = member

    # -- reading --------------------------------------------------------------------------
    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._members

    def names(self, filter: str = "") -> list[str]:
        """Sorted names, optionally those matching the fnmatch pattern ``filter``."""
        names = sorted(self._members)
        return [n for n in names if fnmatch.fnmatch(n, filter)] if filter else names

    def entry(self, name: str) -> Member[T]:
        """The light record of ``name`` (nothing imported); the family's error if unknown."""
        if name not in self:
            raise self._unknown(name, self.names())
        return self._members[name]

    def entries(self) -> list[Member[T]]:
        """Every member's light record, in registration order."""
        return list(self._members.values())

    def members(self) -> list[T]:
        """Every member's implementation, in registration order (declared ones are loaded)."""
        return [self.load(name) for name in self._members]

    def load(self, name: str) -> T:
        """The implementation of ``name``, importing a declared one on first use."""
        member = self.entry(name)
        if not member.loaded:
            obj = _import(member.impl)
            current = self._members[name]  # importing may have registered it already
            if not current.loaded:
                self._members[name] = replace(current, impl=obj)
        return self._members[name].impl

    def create(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Build member ``name``: ``load(name)(*args, **kwargs)``."""
        return self.load(name)(*args, **kwargs)  # type: ignore[operator]

    def settings(self, name: str, values: Mapping[str, Any]) -> Any:
        """``name``'s settings dataclass built from ``values`` (validated by the dataclass)."""
        cls = self.entry(name).settings
        if cls is None:
            raise TypeError(f"{self.kind} {name!r} has no settings")
        return cls(**values)
