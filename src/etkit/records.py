"""How etkit declares a record: :func:`record`, a :func:`dataclasses.dataclass` whose ``__repr__``, ``__eq__``
and ``__hash__`` are shared functions rather than methods generated for each class.

Python 3.11's ``dataclass`` writes each generated method as source text and compiles it: about 0.15 ms a
method, three or four per class, 264 compilations (44 ms, a sixth of the CPU) of ``etkit analyze`` on a small
Kineto trace, before any work. :func:`record` gives the class the same ``__init__`` (and, for a frozen class,
the same ``__setattr__``/``__delattr__``) from ``dataclass`` itself, and the other three as closures over the
class's fields, with the same results as the generated ones:

- ``__repr__``: ``Name(a=1, b='x')``, the fields with ``repr=True``, ``...`` for a record inside itself;
- ``__eq__``: ``NotImplemented`` for another class, else the tuples of the fields with ``compare=True``;
- ``__hash__``: for a frozen record, the hash of the tuple of its hashed fields; ``None`` (unhashable) for a
  mutable one; a ``__hash__`` (or ``__eq__``, ``__repr__``) the class defines itself is kept, as ``dataclass``
  keeps it.

The result is a dataclass in every other respect (:func:`dataclasses.fields`, ``replace``, ``asdict``,
``__match_args__``, slots, keyword-only fields). ``order=True`` and ``unsafe_hash=True`` go to ``dataclass``
unchanged. Only :attr:`__dataclass_params__` tells the difference (``repr`` and ``eq`` read False there).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from operator import attrgetter
from reprlib import recursive_repr
from typing import TYPE_CHECKING, Any, TypeVar, overload

if TYPE_CHECKING:  # (typing's own from Python 3.11)
    from typing_extensions import dataclass_transform
else:  # so that type checkers read record's classes as dataclasses; nothing at run time
    dataclass_transform = getattr(typing, "dataclass_transform", lambda **_: lambda function: function)

__all__ = ["record"]

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
    made: Any = dataclasses.dataclass(cls, repr=False, eq=False, **options)
    fields = dataclasses.fields(made)
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
