"""etkit.records.record against dataclasses.dataclass: the same repr, equality and hashing, class by class."""

from __future__ import annotations

import dataclasses
import pickle
import re
from dataclasses import field
from typing import ClassVar  # noqa: F401 - read by dataclass from this module for the "ClassVar[int]" annotation below

import pytest

from etkit.records import record


def _pair(decorate_options: dict, body: dict, bases: tuple = ()):
    """The same class body made by dataclass and by record."""
    def make(decorator):
        cls = type("Rec", bases, {"__annotations__": dict(body["__annotations__"]), "__module__": __name__,
                                  "__qualname__": "Rec", **{k: v for k, v in body.items() if k != "__annotations__"}})
        return decorator(**decorate_options)(cls) if decorate_options else decorator(cls)
    return make(dataclasses.dataclass), make(record)


SHAPES = [
    ({}, {"__annotations__": {"a": "int", "b": "str"}, "b": "x"}),
    ({"frozen": True}, {"__annotations__": {"a": "int", "b": "tuple"}, "b": (1, 2)}),
    ({"frozen": True, "slots": True}, {"__annotations__": {"a": "int"}}),
    ({"slots": True}, {"__annotations__": {"a": "int", "b": "list"}, "b": field(default_factory=list)}),
    ({}, {"__annotations__": {"a": "int", "hidden": "int", "k": "ClassVar[int]"}, "hidden": field(default=0, repr=False, compare=False), "k": 3}),
    ({"frozen": True}, {"__annotations__": {"a": "int", "b": "int"}, "b": field(default=0, hash=False)}),
    ({"frozen": True}, {"__annotations__": {"a": "int", "b": "int"}, "b": field(default=0, compare=False, hash=True)}),
    ({"eq": False}, {"__annotations__": {"a": "int"}}),
    ({"repr": False}, {"__annotations__": {"a": "int"}}),
    ({"frozen": True, "eq": False}, {"__annotations__": {"a": "int"}}),
    ({"frozen": True, "kw_only": True}, {"__annotations__": {"a": "int"}}),
    ({}, {"__annotations__": {}}),
    ({"frozen": True}, {"__annotations__": {}}),
    ({}, {"__annotations__": {"a": "int"}, "__repr__": lambda self: "mine", "__eq__": lambda self, o: True}),
    ({"frozen": True}, {"__annotations__": {"a": "int"}, "__eq__": lambda self, o: True}),
    ({"frozen": True}, {"__annotations__": {"a": "int"}, "__hash__": lambda self: 7}),
    ({}, {"__annotations__": {"a": "int"}, "__hash__": lambda self: 7}),
    ({"order": True}, {"__annotations__": {"a": "int"}}),
    ({"unsafe_hash": True}, {"__annotations__": {"a": "int"}}),
]


@pytest.mark.parametrize(("options", "body"), SHAPES)
def test_record_behaves_as_dataclass(options, body):
    plain, ours = _pair(options, body)
    names = [f.name for f in dataclasses.fields(plain)]
    assert names == [f.name for f in dataclasses.fields(ours)] and dataclasses.is_dataclass(ours)
    assert plain.__match_args__ == ours.__match_args__
    kw = options.get("kw_only", False)
    values = [(1, "x"), (1, "x"), (2, "y"), (float("nan"), "z")]
    made = [[(cls(**dict(zip(names, v))) if kw else cls(*v[:len(names)])) for v in values] for cls in (plain, ours)]
    (p, o) = made
    for i in range(len(values)):
        assert re.sub(" at 0x[0-9a-f]+", "", repr(p[i])) == re.sub(" at 0x[0-9a-f]+", "", repr(o[i]))
        for j in range(len(values)):
            assert (p[i] == p[j]) == (o[i] == o[j]) and (p[i] != p[j]) == (o[i] != o[j])
        assert (p[i] == 5) == (o[i] == 5)
        assert (plain.__hash__ is None) == (ours.__hash__ is None)
        if plain.__hash__ is not None:
            assert hash(p[i]) == hash(o[i]) or plain.__hash__ is object.__hash__
    assert (ours.__dict__.get("__hash__", "absent") is None) == (plain.__dict__.get("__hash__", "absent") is None)
    if not options.get("frozen") and names:
        o[0].a = 9
        assert o[0].a == 9
    elif names:
        with pytest.raises(dataclasses.FrozenInstanceError):
            o[0].a = 9


def test_a_record_inside_itself_reprs_as_dataclass_does():
    @record
    class Node:
        value: int
        children: list = field(default_factory=list)

    n = Node(1)
    n.children.append(n)
    assert repr(n) == "test_a_record_inside_itself_reprs_as_dataclass_does.<locals>.Node(value=1, children=[...])"
    assert Node.__repr__.__qualname__.endswith("Node.__repr__")


@record(frozen=True)
class _Picklable:
    a: int
    b: tuple = ()


def test_records_replace_asdict_and_pickle():
    r = _Picklable(1, (2,))
    assert dataclasses.replace(r, a=3) == _Picklable(3, (2,)) and dataclasses.asdict(r) == {"a": 1, "b": (2,)}
    assert pickle.loads(pickle.dumps(r)) == r and {r: 1}[_Picklable(1, (2,))] == 1


def test_a_record_subclass_compares_its_own_fields():
    @record(frozen=True)
    class Base:
        a: int

    @record(frozen=True)
    class Child(Base):
        b: int = 0

    assert Child(1, 2) != Child(1, 3) and Child(1, 2) == Child(1, 2) and Base(1) != Child(1, 2)
    assert repr(Child(1, 2)).endswith("Child(a=1, b=2)") and hash(Child(1, 2)) == hash((1, 2))


def test_records_compile_only_init():
    import builtins
    compiled = []
    real = builtins.exec

    def counting(src, *a, **k):
        compiled.append(src)
        return real(src, *a, **k)

    builtins.exec = counting
    try:
        @record
        class A:
            x: int
            y: int = 0
    finally:
        builtins.exec = real
    assert len(compiled) == 1 and "__init__" in compiled[0]


def test_one_decorator_serves_several_classes_alike():
    mutable = record(eq=False, repr=False)

    @mutable
    class A:
        x: int

    @mutable
    class B:
        x: int

    for cls in (A, B):
        assert cls(1) != cls(1) and repr(cls(1)).startswith("<") and cls.__hash__ is object.__hash__
