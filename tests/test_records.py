"""etkit.records.record against dataclasses.dataclass: the same repr, equality and hashing, class by class."""

from __future__ import annotations

import dataclasses
import pickle
import re
from dataclasses import field
from typing import ClassVar  # noqa: F401 - read by dataclass from this module for the "ClassVar[int]" annotation below

import pytest

from etkit.records import RecordInit, record


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


def _compiled(make):
    """The source texts exec'd while ``make()`` runs (dataclass compiles each method it writes)."""
    import builtins
    compiled = []
    real = builtins.exec

    def counting(src, *a, **k):
        compiled.append(src)
        return real(src, *a, **k)

    builtins.exec = counting
    try:
        make()
    finally:
        builtins.exec = real
    return compiled


def test_records_compile_nothing():
    def mutable():
        @record
        class A:
            x: int
            y: int = 0

    def frozen():
        @record(frozen=True)
        class B:
            x: int

    if RecordInit is None:  # dataclass writes the __init__
        assert len(_compiled(mutable)) == 1
        return
    assert _compiled(mutable) == [] and _compiled(frozen) == []


def test_a_frozen_records_setattr_and_delattr_are_dataclass_ones():
    made = []
    for decorator in (dataclasses.dataclass(frozen=True), record(frozen=True)):
        @decorator
        class F:
            x: int
            y: int = 0

        class Open(F):  # (no dataclass: its own attributes may be set, its fields not)
            pass

        made.append((F, Open))
    assert len(made) == 2
    for (F, Open) in made:
        f, o = F(1), Open(1)
        for obj, name in ((f, "x"), (f, "z"), (o, "x")):
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
                setattr(obj, name, 2)
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
                delattr(obj, name)
        o.z = 3
        del o.z
        assert not hasattr(o, "z") and F.__dataclass_params__.frozen
        assert F.__setattr__.__qualname__.endswith("F.__setattr__") and F.__delattr__.__qualname__.endswith("F.__delattr__")


@pytest.mark.parametrize(("base_frozen", "frozen"), [(True, True), (True, False), (False, True)])
def test_a_record_derived_from_a_dataclass_is_checked_as_dataclass_checks_it(base_frozen, frozen):
    outcomes = []
    for decorator in (dataclasses.dataclass, record):
        @decorator(frozen=base_frozen)
        class Base:
            a: int

        try:
            @decorator(frozen=frozen)
            class Child(Base):
                b: int = 0
        except TypeError as exc:
            outcomes.append(str(exc))
            continue
        child = Child(1, 2)
        with pytest.raises(dataclasses.FrozenInstanceError):
            child.a = 5
        outcomes.append("made")
    assert outcomes[0] == outcomes[1]


def test_a_frozen_record_that_defines_setattr_is_refused_as_dataclass_refuses_it():
    def body(decorator):
        @decorator(frozen=True)
        class S:
            a: int

            def __setattr__(self, name, value):  # noqa: ANN001, ANN204
                pass

    messages = []
    for decorator in (dataclasses.dataclass, record):
        with pytest.raises(TypeError) as refused:
            body(decorator)
        messages.append(str(refused.value))
    assert messages[0] == messages[1] == "Cannot overwrite attribute __setattr__ in class S"


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


def _calls_log(self):  # a __post_init__ that shows when it ran: after every field was assigned
    object.__setattr__(self, "seen", [getattr(self, n, "<unset>") for n in ("a", "b", "c")])


#: Shapes of __init__ beyond SHAPES: factories, init=False fields, __post_init__, keyword-only fields, many fields.
INIT_SHAPES = [
    ({}, {"__annotations__": {"a": "int", "b": "list", "c": "int"}, "b": field(default_factory=list),
          "c": field(default=3, init=False)}),
    ({"slots": True}, {"__annotations__": {"a": "int", "b": "int", "c": "list"}, "b": field(default=2, init=False),
                       "c": field(default_factory=list, init=False)}),
    ({}, {"__annotations__": {"a": "int", "b": "int"}, "b": 0, "__post_init__": _calls_log}),
    ({"frozen": True}, {"__annotations__": {"a": "int", "b": "int", "c": "int"}, "c": 1, "__post_init__": _calls_log}),
    ({}, {"__annotations__": {"a": "int", "b": "int", "c": "int"}, "b": field(default=1, kw_only=True),
          "c": field(kw_only=True)}),
    ({"kw_only": True}, {"__annotations__": {"a": "int", "b": "str", "c": "list"}, "b": "x",
                         "c": field(default_factory=list)}),
    ({}, {"__annotations__": {f"f{i}": "int" for i in range(40)}, **{f"f{i}": i for i in range(20, 40)}}),
    ({}, {"__annotations__": {"self": "int", "a": "int"}, "a": 1}),
]

_CALLS = [((), {}), ((1,), {}), ((1, 2), {}), ((1, 2, 3), {}), ((1, 2, 3, 4), {}), ((), {"a": 1}), ((1,), {"a": 2}),
          ((1,), {"b": 5}), ((1,), {"c": 6}), ((), {"a": 1, "b": 2, "c": 3}), ((1,), {"zz": 0}), ((1, 2, 3), {"c": 1}),
          ((1, 2, 3, 4), {"c": 1}), (tuple(range(40)), {}), (tuple(range(41)), {}), ((), {"self": 1}),
          ((1,), {"f39": 0}), (tuple(range(20)), {"f20": 9})]


def _outcome(cls, args, kwargs):
    try:
        obj = cls(*args, **kwargs)
    except TypeError as e:
        return f"TypeError: {e}"
    names = [f.name for f in dataclasses.fields(cls)] + ["seen"]
    state = list(vars(obj).items()) if hasattr(obj, "__dict__") else [(n, getattr(obj, n, "<unset>")) for n in names]
    return repr(state)


@pytest.mark.parametrize(("options", "body"), SHAPES + INIT_SHAPES)
def test_a_records_init_is_the_one_dataclass_writes(options, body):
    """The same signature, docstring, assignments (in order), __post_init__ call and error texts as dataclass's."""
    import inspect

    plain, ours = _pair(options, body)
    assert str(inspect.signature(plain)) == str(inspect.signature(ours)) and plain.__doc__ == ours.__doc__
    assert str(inspect.signature(plain.__init__)) == str(inspect.signature(ours.__init__))
    for args, kwargs in _CALLS:
        assert _outcome(plain, args, kwargs) == _outcome(ours, args, kwargs), (args, kwargs)
    if RecordInit is not None and "__init__" not in body and not options.get("order") and not options.get("unsafe_hash"):
        assert isinstance(ours.__dict__["__init__"], RecordInit)


def test_a_records_init_binds_as_a_method_and_is_found_by_super():
    @record
    class Base:
        a: int
        b: list = field(default_factory=list)

    class Plain(Base):  # a class that is not a record, calling the record's __init__ itself
        def __init__(self, x):
            super().__init__(x * 2)
            Base.__init__(self, self.a, [x])

    p = Plain(3)
    assert (p.a, p.b) == (6, [3]) and Base(1).b is not Base(1).b
    bound = Base(1).__init__
    bound(4)
    assert bound.__self__.a == 4 and Base.__init__.__qualname__.endswith("Base.__init__")
    with pytest.raises(TypeError, match=r"Base.__init__\(\) missing 1 required positional argument: 'self'"):
        Base.__init__()


def test_a_record_whose_defaults_are_out_of_order_is_refused_as_dataclass_refuses_it():
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @record
        class Bad:
            a: int = 0
            b: int
