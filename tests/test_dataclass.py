"""zerosim/_dataclass.py's `dataclass` against the standard library's on the same class bodies: the same fields,
`__init__` (signature, defaults, factories, `__post_init__`, keyword-only fields), equality, hash, repr (a record
inside itself too), frozen-ness, `replace`, pickling and docstring. Each case builds its class twice from one body,
once per decorator, and compares what each makes."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import KW_ONLY, InitVar
from typing import ClassVar

import pytest

from zerosim._dataclass import dataclass


def both(body, **options):
    """The class `body` makes, decorated by the standard library's and by ours (each a fresh class)."""
    return dataclasses.dataclass(body(), **options), dataclass(body(), **options)


def plain():
    class Point:
        x: int
        y: float = 2.5
        tags: list = dataclasses.field(default_factory=list)
        note: str = dataclasses.field(default="n", repr=False, compare=False)
        kw: int = dataclasses.field(default=7, kw_only=True)

    return Point


def with_post_init():
    class Counted:
        """A record with its own docstring."""

        n: int
        doubled: int = dataclasses.field(init=False, default=0)
        hidden: list = dataclasses.field(init=False, default_factory=lambda: [1])

        def __post_init__(self):
            object.__setattr__(self, "doubled", 2 * self.n)

    return Counted


def empty():
    class Nothing:
        pass

    return Nothing


def one():
    class One:
        value: float

    return One


def undocumented_self():
    class Named:
        self: str  # a field called self: __init__ names its own argument otherwise
        n: int = 1

    return Named


def markers():
    class Marked:  # string annotations (this module's `annotations` future) naming dataclasses' pseudo-fields
        count: ClassVar[int] = 0
        x: int
        scale: InitVar[int] = 2
        _: KW_ONLY
        z: float = 0.5

        def __post_init__(self, scale):
            object.__setattr__(self, "x", self.x * scale)

    return Marked


def outcome(f, *args):
    """What f(*args) returns, or the type of what it raises."""
    try:
        return f(*args)
    except Exception as e:  # noqa: BLE001 (compared, not hidden)
        return type(e)


BODIES = [plain, with_post_init, empty, one, undocumented_self, markers]
ARGS = {plain: ((1,), {"kw": 3}), with_post_init: ((4,), {}), empty: ((), {}), one: ((float("nan"),), {}),
        undocumented_self: (("me",), {"n": 2}), markers: ((3,), {"scale": 5, "z": 1.5})}


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("body", BODIES, ids=lambda b: b.__name__)
def test_the_same_record_as_the_standard_librarys(body, frozen):
    std, ours = both(body, frozen=frozen)
    args, kwargs = ARGS[body]
    a, b = std(*args, **kwargs), ours(*args, **kwargs)
    assert str(inspect.signature(ours)) == str(inspect.signature(std))
    assert ours.__doc__.replace(ours.__qualname__, "X") == std.__doc__.replace(std.__qualname__, "X")
    assert vars(b) == vars(a) or body is one  # nan != nan: the next line compares it bit for bit
    assert repr(vars(b)) == repr(vars(a))
    assert repr(b) == repr(a).replace(std.__qualname__, ours.__qualname__)
    assert [f.name for f in dataclasses.fields(ours)] == [f.name for f in dataclasses.fields(std)]
    assert ours.__match_args__ == std.__match_args__
    assert dataclasses.is_dataclass(ours) and ours.__dataclass_params__.frozen is frozen
    assert (ours.__hash__ is None) == (std.__hash__ is None)
    again = ours(*args, **kwargs)
    assert (b == again) == (a == std(*args, **kwargs))  # the same objects compared the same way (nan: a 1-tuple)
    assert b != a and (b == b)  # another class is never equal; a record is equal to itself (nan inside: identity)
    if frozen:
        assert outcome(hash, b) == outcome(hash, a)  # the same tuple's hash, or the same refusal (a list inside)
        for name in [f.name for f in dataclasses.fields(ours)] + ["other"]:
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot assign to field '{name}'"):
                setattr(b, name, 1)
            with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot delete field '{name}'"):
                delattr(b, name)
    else:
        assert outcome(hash, b) is outcome(hash, a) is TypeError
    changes = {f.name: getattr(b, f.name) for f in dataclasses.fields(ours) if f.init}
    assert repr(dataclasses.replace(b, **changes)) == repr(dataclasses.replace(a, **changes)).replace(
        std.__qualname__, ours.__qualname__)  # (an InitVar's __post_init__ runs again, as it does for both)


def test_equality_reads_the_compared_fields_only():
    std, ours = both(plain)
    assert ours(1, note="a") == ours(1, note="b") and std(1, note="a") == std(1, note="b")
    assert ours(1, tags=[2]) != ours(1) and std(1, tags=[2]) != std(1)
    assert ours(1).__eq__(3) is NotImplemented


def test_a_record_inside_itself_prints_as_dots():
    std, ours = both(plain)
    a, b = std(1), ours(1)
    a.tags.append(a)
    b.tags.append(b)
    assert repr(b) == repr(a).replace(std.__qualname__, ours.__qualname__)
    assert "..." in repr(b)


def test_what_the_class_defines_is_kept():
    class Own:
        x: int

        def __repr__(self):
            return "own"

        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

    made = dataclass(Own, frozen=True)
    assert repr(made(1)) == "own" and made(1) == made(2) and made.__hash__ is object.__hash__

    class Guarded:
        x: int

        def __setattr__(self, name, value):
            pass

    with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__ in class Guarded"):
        dataclass(Guarded, frozen=True)


def test_inheritance_keeps_the_standard_librarys_rules():
    base = dataclass(type("Base", (), {"__annotations__": {"a": int}}), frozen=True)
    child = dataclass(type("Child", (base,), {"__annotations__": {"b": int}, "b": 2}), frozen=True)
    made = child(1)
    assert (made.a, made.b) == (1, 2) and made == child(1, 2) and hash(made) == hash((1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.a = 3
    with pytest.raises(TypeError, match="cannot inherit non-frozen dataclass from a frozen one"):
        dataclass(type("Loose", (base,), {"__annotations__": {"c": int}}))
    loose = dataclass(type("LooseBase", (), {"__annotations__": {"a": int}}))
    with pytest.raises(TypeError, match="cannot inherit frozen dataclass from a non-frozen one"):
        dataclass(type("Tight", (loose,), {"__annotations__": {"c": int}}), frozen=True)
    with pytest.raises(TypeError, match="non-default argument 'c' follows default argument"):
        dataclass(type("Bad", (), {"__annotations__": {"b": int, "c": int}, "b": 1}))


def test_options_it_does_not_make_go_to_the_standard_library():
    made = dataclass(type("Ordered", (), {"__annotations__": {"a": int}}), frozen=True, order=True)
    assert made(1) < made(2) and made.__dataclass_params__.order


def test_a_release_it_was_not_checked_on_gets_the_standard_librarys(monkeypatch):
    # past Python 3.13 (or without a private name it reads) every record is dataclasses.dataclass's own, methods and all
    import zerosim._dataclass as module

    def made():
        return dataclass(type("Elsewhere", (), {"__annotations__": {"a": int}}), frozen=True)

    ours = made()  # this release is one it was checked on: the shared methods of zerosim/_dataclass.py
    assert ours.__eq__.__code__.co_filename == module.__file__
    assert type(vars(ours)["__init__"]) is module._FirstInit
    monkeypatch.setattr(module, "_CHECKED", False)
    std = made()
    assert std.__eq__.__code__.co_filename == "<string>"  # dataclasses compiles each method from its text
    assert std.__hash__.__code__.co_filename == "<string>" and callable(vars(std)["__init__"])
    assert type(vars(std)["__init__"]) is not module._FirstInit
    assert std(1) == std(1) and hash(std(1)) == hash(std(1)) and std(1) != std(2)


@dataclass(frozen=True)
class Pickled:
    x: int
    items: tuple = (1, 2)


def test_a_record_pickles_and_copies_as_itself():
    import copy

    made = Pickled(3)
    assert pickle.loads(pickle.dumps(made)) == made and copy.deepcopy(made) == made
    assert pickle.loads(pickle.dumps(made)) is not made


def test_init_is_compiled_when_first_wanted_and_reads_the_same_before():
    # a record a run never makes never compiles its __init__ (zerosim/_dataclass.py's _FirstInit); asking for its
    # signature, or making one, compiles it then, and it is the standard library's from the first
    class Late:
        """Documented: no signature is read to write a docstring."""

        x: int
        y: str = "y"

    std, ours = dataclasses.dataclass(type("Late", (), dict(vars(Late)))), dataclass(Late, frozen=True)
    assert not inspect.isfunction(vars(ours)["__init__"])  # not compiled yet
    assert str(inspect.signature(ours)) == str(inspect.signature(std))
    assert inspect.isfunction(vars(ours)["__init__"]) and ours.__init__.__qualname__.endswith("<locals>.Late.__init__")
    again = dataclass(type("Again", (), {"__annotations__": {"x": int}, "__doc__": "d"}))
    assert again(5).x == 5 and inspect.isfunction(vars(again)["__init__"])  # compiled by the first record made
    assert again.__init__.__annotations__ == {"x": int, "return": None}


def test_a_records_init_is_run_from_a_code_object_never_from_a_string(monkeypatch):
    # exec of a string runs through CPython's run_eval_code_obj (Python/pythonrun.c, 3.8 on), which marks the process
    # as ended by an unhandled Ctrl-C when a KeyboardInterrupt passes through that code, even one the caller catches:
    # the interpreter then kills itself with SIGINT at exit instead of exiting with the status the program chose. A
    # kind's first record is made mid-step, so Ctrl-C there made `zerosim train` under mpiexec end with status 2, not
    # 130, about one run in ten (tests/test_cli_exits.py). A code object goes straight to PyEval_EvalCode.
    import types

    import zerosim._dataclass as module

    given = []

    def recording_exec(source, *namespaces):
        given.append(type(source))
        return exec(source, *namespaces)

    monkeypatch.setattr(module, "exec", recording_exec, raising=False)  # the module's name `exec` finds this first
    if not module._CHECKED:
        pytest.skip("this Python's records are the standard library's own (zerosim/_dataclass.py _CHECKED)")

    @dataclass(frozen=True)
    class Fresh:
        a: int
        b: int = 2

    assert Fresh(1) == Fresh(1, 2)  # the first record of the kind builds its __init__
    assert given == [types.CodeType]
