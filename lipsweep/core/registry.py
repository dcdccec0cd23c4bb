"""One registry mechanism for every family that grows: regularizers, attacks, Lipschitz
estimators, datasets, searchers and schedulers.

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

Plugins: a family that calls :meth:`Registry.use_entry_points` (each of lipsweep's six, at
the end of its index) also takes members from installed distributions. Each entry point of
the group names one member and the module that adds it::

    [project.entry-points."lipsweep.regularizers"]
    myreg = "mypkg.lipsweep_plugin"   # importing it declares or registers `myreg`

They are imported on the family's first read (``names``, ``entry``, ``in``, ...), once, so
importing lipsweep stays cheap; a plugin module that only *declares* its members by import
path (as the built-in indexes do) keeps ``--dry-run`` free of torch. A plugin that fails to
import, or that adds no member of its entry point's name, is a :class:`PluginError` naming
the entry point and its distribution (exit 2 from the CLI).
"""

from __future__ import annotations

import fnmatch
import importlib
import sys
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Generic, Mapping, Optional, TypeVar

from lipsweep.core.config_base import UsageError

if TYPE_CHECKING:  # pragma: no cover
    from importlib.metadata import EntryPoint

T = TypeVar("T")


class PluginError(UsageError):
    """An installed plugin (an entry point of a ``lipsweep.*`` group) could not be loaded."""


_SCAN: list[Any] = []  # [(sys.path when scanned, every entry point)]: one scan per sys.path


def _entry_points(group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``; the distributions are scanned once for all
    families (again only when ``sys.path`` changed). importlib.metadata (which imports csv,
    email, zipfile) is imported on the first scan, not with lipsweep."""
    import importlib.metadata

    key = tuple(sys.path)
    if not _SCAN or _SCAN[0][0] != key:
        _SCAN[:] = [(key, importlib.metadata.entry_points())]
    return list(_SCAN[0][1].select(group=group))


def _origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    where = f"distribution {dist.name} {dist.version}" if dist is not None else "no distribution"
    return f"plugin {ep.name!r} ({ep.group} = {ep.value!r}, {where})"


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


def import_path(path: str) -> Any:
    """The object an import path names: ``module:attr`` (dots in ``attr`` walk attributes)."""
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
        self._group: Optional[str] = None  # entry-point group of plugins (use_entry_points)
        self._plugins_read = True  # no group yet: nothing to read
        self._plugins_loading = False
        self._plugins_done: set[tuple[str, str]] = set()  # (name, value) imported

    # -- plugins --------------------------------------------------------------------------
    def use_entry_points(self, group: str) -> None:
        """Take members from installed distributions too: the entry points of ``group``,
        imported on the family's first read after this call (see the module docstring)."""
        self._group, self._plugins_read = group, False

    def load_entry_points(self) -> None:
        """Import every entry point of the family's group not imported yet (the first read
        does this; call it again after installing a plugin into a running process).
        :class:`PluginError` naming the entry point and its distribution if one fails."""
        if self._group is None or self._plugins_loading:
            return
        self._plugins_loading = True  # a plugin reading the family while it registers
        try:
            for ep in _entry_points(self._group):
                if (ep.name, ep.value) not in self._plugins_done:
                    self._load_entry_point(ep)
                    self._plugins_done.add((ep.name, ep.value))
            self._plugins_read = True
        finally:
            self._plugins_loading = False

    def _load_entry_point(self, ep: EntryPoint) -> None:
        try:
            ep.load()
        except Exception as err:  # noqa: BLE001 - whatever it raised, it is this plugin's
            text = " ".join(f"{type(err).__name__}: {err}".split())
            raise PluginError(
                f"{_origin(ep)} failed to load: {text}; fix or uninstall that distribution"
            ) from err
        if ep.name not in self._members:
            raise PluginError(
                f"{_origin(ep)} added no {self.kind} named {ep.name!r}: its module must "
                f"register or declare the {self.kind} under the entry point's name"
            )

    def _read(self) -> None:
        """Every read of the family first loads its plugins, once."""
        if not self._plugins_read:
            self.load_entry_points()

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
        self._read()
        return isinstance(name, str) and name in self._members

    def names(self, filter: str = "") -> list[str]:
        """Sorted names, optionally those matching the fnmatch pattern ``filter``."""
        self._read()
        names = sorted(self._members)
        return [n for n in names if fnmatch.fnmatch(n, filter)] if filter else names

    def entry(self, name: str) -> Member[T]:
        """The light record of ``name`` (nothing imported); the family's error if unknown."""
        if name not in self:
            raise self._unknown(name, self.names())
        return self._members[name]

    def entries(self) -> list[Member[T]]:
        """Every member's light record, in registration order."""
        self._read()
        return list(self._members.values())

    def members(self) -> list[T]:
        """Every member's implementation, in registration order (declared ones are loaded)."""
        self._read()
        return [self.load(name) for name in self._members]

    def load(self, name: str) -> T:
        """The implementation of ``name``, importing a declared one on first use."""
        member = self.entry(name)
        if not member.loaded:
            obj = import_path(member.impl)
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


def _field_names(cls: Optional[type]) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(cls)} if cls is not None else set()


class Family(Registry[T]):
    """One family of members: the registry with the facade every family shares.

    A member's light facts are its *spec*, one frozen dataclass of the family's ``spec_type``
    (an attack's eps field and metric stem, an estimator's outputs, a regularizer's settings
    and labels), known before its implementation is imported. A built-in is declared with its
    spec and import path in the family's torch-free index; the implementation's file adds it
    with the family's decorator (:meth:`register`), which keeps the declared spec. A member
    that is not declared (a plugin, a test) gives its spec to the decorator: as ``spec=``, as
    the spec's fields by keyword, or as class attributes of those names.

        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class Doc:
        ...     summary: str
        >>> widgets = Family("widget", spec_type=Doc)
        >>> @widgets.register("shout", summary="upper case")
        ... def shout(text):
        ...     return text.upper()
        >>> widgets.names(), widgets.spec("shout").summary, widgets.create("shout", "hi")
        (['shout'], 'upper case', 'HI')
    """

    def __init__(
        self,
        kind: str,
        *,
        spec_type: Optional[type] = None,
        unknown: Optional[Callable[[str, list[str]], Exception]] = None,
        check: Optional[Callable[[str, Any], None]] = None,
        on_register: Optional[Callable[[str, Any, Any], None]] = None,
        default_settings: Optional[type] = None,
    ) -> None:
        super().__init__(kind, unknown)
        self.spec_type = spec_type
        self._check_spec = check
        self._on_register = on_register
        self.default_settings = default_settings
        """The settings of a member registered undeclared without its own (the searchers'
        shared ``search:`` keys)."""

    def _spec_of(self, name: str, obj: Any, spec: Any, fields_: Mapping[str, Any]) -> Any:
        if spec is not None or self.spec_type is None:
            return spec
        if fields_:
            return self.spec_type(**fields_)
        import dataclasses

        fields_all = dataclasses.fields(self.spec_type)
        required = [
            f.name
            for f in fields_all
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if required and all(getattr(obj, n, None) for n in required):
            return self.spec_type(
                **{f.name: getattr(obj, f.name) for f in fields_all if hasattr(obj, f.name)}
            )
        raise TypeError(
            f"{self.kind} {name!r} is not declared: give its {self.spec_type.__name__} "
            f"(spec=..., or the fields {required} by keyword or as class attributes)"
        )

    def declare(  # type: ignore[override]
        self,
        name: str,
        impl: str,
        *,
        spec: Any = None,
        settings: Optional[type] = None,
        info: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Declare a member by the import path of its implementation, with its spec."""
        if spec is not None and self._check_spec is not None:
            self._check_spec(name, spec)
        facts = {**(info or {}), **({"spec": spec} if spec is not None else {})}
        settings = settings or getattr(spec, "settings", None)
        super().declare(name, impl, settings=settings, info=facts)

    def register(  # type: ignore[override]
        self,
        name: Optional[str] = None,
        *,
        spec: Any = None,
        settings: Optional[type] = None,
        info: Optional[Mapping[str, Any]] = None,
        **spec_fields: Any,
    ) -> Callable[[T], T]:
        """Decorator: add a class or factory under ``name`` (default: ``spec.name``, the
        object's ``name`` attribute or ``__name__``). A declared member keeps its declared
        spec and settings unless given; ``info`` given as the family's spec dataclass is the
        spec (``register_searcher(name, info=SearcherInfo(...))``)."""
        if self.spec_type is not None and isinstance(info, self.spec_type):
            spec, info = info, None
        if settings is not None and spec_fields and "settings" in _field_names(self.spec_type):
            spec_fields = {**spec_fields, "settings": settings}  # the spec carries it too

        def deco(obj: T) -> T:
            key = name or getattr(spec, "name", None) or getattr(obj, "name", None)
            key = key or obj.__name__  # type: ignore[attr-defined]
            old = self._members.get(key)
            declared = old is not None and not old.loaded
            given = spec is not None or bool(spec_fields)
            member_spec = None
            if given or not declared:
                member_spec = self._spec_of(key, obj, spec, spec_fields)
                if member_spec is not None and self._check_spec is not None:
                    self._check_spec(key, member_spec)
            facts = {**(info or {}), **({"spec": member_spec} if member_spec is not None else {})}
            default = None if declared else self.default_settings
            self.add(
                key,
                obj,
                settings=settings or getattr(member_spec, "settings", None) or default,
                info=facts or None,
            )
            if self._on_register is not None:
                self._on_register(key, obj, self._members[key].info.get("spec"))
            return obj

        return deco

    def spec(self, name: str) -> Any:
        """The light facts of ``name`` (nothing imported); the family's error if unknown."""
        return self.entry(name).info.get("spec")

    def specs(self) -> list[Any]:
        """Every member's spec, in registration order (nothing imported)."""
        return [m.info.get("spec") for m in self.entries()]

    def is_member(self, name: object) -> bool:
        """True if ``name`` is a member (plugins included)."""
        return name in self

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests register temporary members)."""
        self.remove(name)
