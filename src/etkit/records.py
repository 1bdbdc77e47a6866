"""How etkit declares a record: :func:`record`, a :func:`dataclasses.dataclass` whose ``__init__``,
``__repr__``, ``__eq__`` and ``__hash__`` are shared rather than methods generated for each class.

Python 3.11's ``dataclass`` writes each generated method as source text and compiles it: about 0.2 ms a
method, three or four per class, 264 compilations (44 ms, a sixth of the CPU) of ``etkit analyze`` on a small
Kineto trace, before any work. :func:`record` keeps ``dataclass``'s fields and checks and supplies the methods
itself, with the same results as the generated ones:

- ``__init__``: where the package was built with a C compiler, an ``etkit._records.RecordInit`` made from the
  fields: the same parameters (positional, then keyword-only; defaults; ``<factory>`` for a default factory),
  the same assignments in the same order (``object.__setattr__`` for a frozen record; an ``init=False`` field
  with a factory, or with a default in a slots record, assigned too), ``__post_init__`` called last, the same
  ``TypeError`` texts for a wrong call, and an ``inspect.signature``. Without the compiled module, or for a
  class with an ``InitVar``, ``dataclass`` writes it;
- a frozen record's ``__setattr__``/``__delattr__``: ``FrozenInstanceError`` for an instance of the class itself
  or for one of its fields, else the next class's method (``dataclass`` writes them only for a frozen record
  that derives from a dataclass, has slots, or defines either method itself, where its own checks apply);
- ``__repr__``: ``Name(a=1, b='x')``, the fields with ``repr=True``, ``...`` for a record inside itself;
- ``__eq__``: ``NotImplemented`` for another class, else the tuples of the fields with ``compare=True``;
- ``__hash__``: for a frozen record, the hash of the tuple of its hashed fields; ``None`` (unhashable) for a
  mutable one; an ``__init__``, ``__hash__``, ``__eq__`` or ``__repr__`` the class defines itself is kept, as
  ``dataclass`` keeps it.

The result is a dataclass in every other respect (:func:`dataclasses.fields`, ``replace``, ``asdict``,
``__match_args__``, slots, keyword-only fields, the docstring a class without one is given). ``order=True`` and
``unsafe_hash=True`` go to ``dataclass`` unchanged. Only :attr:`__dataclass_params__` tells the difference
(``init``, ``repr`` and ``eq`` read False there).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterable
from operator import attrgetter
from reprlib import recursive_repr
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:  # (typing's own from Python 3.11)
    from typing_extensions import dataclass_transform
else:  # so that type checkers read record's classes as dataclasses; nothing at run time
    dataclass_transform = getattr(typing, "dataclass_transform", lambda **_: lambda function: function)

try:  # the compiled __init__ (an optional extension: without it, dataclass writes each class's __init__)
    from ._records import RecordInit as _RecordInit
except ImportError:  # pragma: no cover (the package built without a C compiler)
    _RecordInit = None  # type: ignore[assignment, misc]

#: The compiled module's ``__init__`` type, or ``None`` where it was not built.
RecordInit: type[_RecordInit] | None = _RecordInit

__all__ = ["record"]

#: How :class:`RecordInit` assigns a field: an argument (its default when not given), an argument whose
#: default is its factory's result, the field's default itself, its factory's result (``_records.c``).
_PARAM, _FACTORY_PARAM, _SET, _SET_FACTORY = 0, 1, 2, 3

T = TypeVar("T", bound=type)


@overload
def record(cls: T, /) -> T: ...


@overload
def record(cls: None = None, /, **options: Any) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T | None = None, /, **options: Any) -> T | Callable[[T], T]:
    """``@record`` or ``@record(frozen=True, ...)``: ``@dataclass`` with the same options and results (see the
    module docstring)."""
    if cls is None:
        return lambda c: _record(c, options)
    return _record(cls, options)


def _record(cls: T, options: dict[str, Any]) -> T:
    if options.get("order") or options.get("unsafe_hash"):
        return dataclasses.dataclass(cls, **options)  # type: ignore[return-value]
    options = dict(options)  # (one record(...) may decorate several classes: its options stay as given)
    want_repr, want_eq = options.pop("repr", True), options.pop("eq", True)
    own = dict(cls.__dict__)  # what the class body defines (slots=True makes a new class)
    shared_init = RecordInit is not None and options.get("init", True) and "__init__" not in own \
        and not _has_initvar(cls)
    docless = shared_init and not own.get("__doc__")
    shared_frozen = bool(options.get("frozen")) and _frozen_here(cls, options, own)
    if shared_frozen:  # (made frozen below: dataclass has nothing to check or write for it)
        options["frozen"] = False
    if shared_init:
        options["init"] = False
        if docless:  # (dataclass would read the class's signature before its __init__ is in place)
            cls.__doc__ = "?"
    made: Any = dataclasses.dataclass(cls, repr=False, eq=False, **options)
    fields = dataclasses.fields(made)
    if shared_frozen:
        made.__dataclass_params__.frozen = options["frozen"] = True
        for method in _frozen_methods(made, tuple(f.name for f in fields)):
            _put(made, method)
    if shared_init:
        made.__init__ = _init_of(made, fields, slots=bool(options.get("slots")))
        if docless:
            made.__doc__ = _Docstring(made)
    if want_repr and "__repr__" not in own:
        _put(made, _repr_of([f.name for f in fields if f.repr]))
    if want_eq:
        key = _key_of([f.name for f in fields if f.compare])
        if "__eq__" not in own:
            _put(made, _eq_of(key))
        class_hash = own.get("__hash__", dataclasses.MISSING)
        explicit_hash = not (class_hash is dataclasses.MISSING or (class_hash is None and "__eq__" in own))
        if not explicit_hash and options.get("frozen"):
            _put(made, _hash_of(_key_of([f.name for f in fields if (f.compare if f.hash is None else f.hash)])))
        elif not explicit_hash:
            made.__hash__ = None
    return made  # type: ignore[no-any-return]


def _frozen_here(cls: type, options: dict[str, Any], own: dict[str, Any]) -> bool:
    """Whether a frozen record's ``__setattr__``/``__delattr__`` can be :func:`_frozen_methods`: no dataclass
    among its bases (whose frozenness ``dataclass`` checks), no slots (whose pickling of a frozen class it
    writes) and neither method defined by the class (which it refuses)."""
    if options.get("slots") or "__setattr__" in own or "__delattr__" in own:
        return False
    return not any(hasattr(base, "__dataclass_fields__") for base in cls.__mro__[1:])


def _frozen_methods(owner: Any, names: tuple[str, ...]) -> tuple[Callable[..., None], Callable[..., None]]:
    """The ``__setattr__`` and ``__delattr__`` ``dataclass`` writes for a frozen class with fields ``names``."""
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(owner, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is owner or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(owner, self).__delattr__(name)

    return __setattr__, __delattr__


def _has_initvar(cls: type) -> bool:
    """Whether the class (or a dataclass it derives from) may have an ``InitVar``, which :class:`RecordInit`
    does not take: an annotation that names one, or a base's pseudo-field (``InitVar`` or ``ClassVar``)."""
    for value in cls.__dict__.get("__annotations__", {}).values():
        if value is dataclasses.InitVar or isinstance(value, dataclasses.InitVar) or \
                (isinstance(value, str) and "InitVar" in value):
            return True
    for base in cls.__mro__[1:]:
        declared = base.__dict__.get("__dataclass_fields__")
        if declared is not None and len(declared) != len(dataclasses.fields(base)):
            return True
    return False


def _init_of(cls: type, fields: tuple[dataclasses.Field[Any], ...], *, slots: bool) -> Any:
    """The :class:`RecordInit` of a class whose fields are ``fields``, as ``dataclass`` would write its
    ``__init__`` (``slots``: the class was made with ``slots=True``, whose ``init=False`` fields with a default are
    assigned too)."""
    positional = [f for f in fields if f.init and not f.kw_only]
    keyword = [f for f in fields if f.init and f.kw_only]
    seen_default = False
    for f in positional:  # dataclass's own check, with its message
        if _has_default(f):
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {f.name!r} follows default argument")
    params = positional + keyword
    number = {f.name: j for j, f in enumerate(params)}
    names: list[str] = []
    kinds = bytearray()
    param_of: list[int] = []
    values: list[Any] = []
    for f in fields:
        factory = f.default_factory is not dataclasses.MISSING
        if f.init:
            kind, value = (_FACTORY_PARAM, f.default_factory) if factory else \
                (_PARAM, None if f.default is dataclasses.MISSING else f.default)
        elif factory:
            kind, value = _SET_FACTORY, f.default_factory
        elif slots and f.default is not dataclasses.MISSING:
            kind, value = _SET, f.default
        else:  # read from the class's attribute, or not set at all, as dataclass leaves it
            continue
        names.append(f.name)
        kinds.append(kind)
        param_of.append(number[f.name] if f.init else -1)
        values.append(value)
    self_name = _self_name(fields)
    assert RecordInit is not None
    return RecordInit(f"{cls.__qualname__}.__init__", self_name, tuple(f.name for f in params), len(positional),
                      sum(map(_has_default, positional)), bytes(not _has_default(f) for f in params), tuple(names),
                      bytes(kinds), tuple(param_of), tuple(values), cls.__dataclass_params__.frozen,  # type: ignore[attr-defined]
                      hasattr(cls, "__post_init__"), lambda: _signature(self_name, positional, keyword), cls)


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def _signature(self_name: str, positional: list[dataclasses.Field[Any]], keyword: list[dataclasses.Field[Any]]) -> Any:
    """The ``inspect.Signature`` of the ``__init__`` dataclass writes: ``self_name``, the fields with their types and defaults (``<factory>`` for a factory), ``-> None``."""
    import inspect

    kind = inspect.Parameter

    def param(f: dataclasses.Field[Any], where: Any) -> inspect.Parameter:
        default = f.default if f.default is not dataclasses.MISSING else \
            dataclasses._HAS_DEFAULT_FACTORY if f.default_factory is not dataclasses.MISSING else kind.empty  # type: ignore[attr-defined]
        return kind(f.name, where, default=default, annotation=f.type)

    return inspect.Signature([kind(self_name, kind.POSITIONAL_OR_KEYWORD),
                              *(param(f, kind.POSITIONAL_OR_KEYWORD) for f in positional),
                              *(param(f, kind.KEYWORD_ONLY) for f in keyword)], return_annotation=None)


def _self_name(fields: Iterable[dataclasses.Field[Any]]) -> str:
    """The instance's parameter, as dataclass names it: ``self``, unless a field is named so."""
    return "__dataclass_self__" if any(f.name == "self" for f in fields) else "self"


class _Docstring:
    """The docstring dataclass gives a class without one, its name and signature, made when first read (a
    signature is 0.07 ms; most records' docstrings are never read)."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __get__(self, obj: Any, owner: type | None = None) -> str:
        import inspect

        try:
            doc = self.cls.__name__ + str(inspect.signature(self.cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            doc = self.cls.__name__
        self.cls.__doc__ = doc
        return doc


def _put(cls: type, method: Callable[..., Any]) -> None:
    """``cls.<name> = method``, named as ``dataclass`` names the methods it makes (``Class.__repr__``)."""
    method.__qualname__ = f"{cls.__qualname__}.{method.__name__}"
    setattr(cls, method.__name__, method)


def _key_of(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of the attributes ``names`` of an object (a tuple for one name or none too)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        get = attrgetter(names[0])
        return lambda obj: (get(obj),)
    return lambda obj: ()


def _repr_of(names: list[str]) -> Callable[[Any], str]:
    @recursive_repr()
    def __repr__(self: Any) -> str:
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

    return __repr__


def _eq_of(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented

    return __eq__


def _hash_of(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))

    return __hash__
