"""The package's `dataclass`: the standard library's, with the same fields, `__init__`, equality, hash, repr and
frozen-ness, made for a fraction of the cost.

    from zerosim._dataclass import dataclass          # instead of `from dataclasses import dataclass`
    @dataclass(frozen=True)
    class Hop: ...

Python 3.11's `dataclasses.dataclass` writes each method it makes as source and compiles it: a frozen record costs six
(`__init__`, `__repr__`, `__eq__`, `__setattr__`, `__delattr__`, `__hash__`), and the engine's import path defined 50
records: 27 ms of `from zerosim import ZeroEngine`, against `import numpy`'s whole 55 ms (benchmarks/imports.py).
Here the standard library still reads the fields (`dataclasses.fields`, `replace`, `asdict`, `is_dataclass` and
pickling see a dataclass) and makes no method. `__init__`, the one method that runs per record made, is compiled
as `dataclasses._init_fn` writes it (its annotations set after), so a record is made as fast, but only when first
wanted (the first record made, or its signature asked for: `_FirstInit`): of the 48 records a first script's names
define, the import itself makes 11 (its tables: formats, policies, recipes, ...); tests/test_import_graph.py.
The other methods are the same function for every record, over the class's field names read once by
`operator.attrgetter`: equality compares the fields as the running Python's dataclasses does (`_eq`: 3.13 changed
how), hash hashes the same tuple of the same fields, repr prints the same text, and a frozen record refuses the same
assignments with the same `FrozenInstanceError` (an equality or a hash costs 0.1-0.3 µs more a call than the
generated one; a step compares no records in bulk, and steps took the same time). The command
line's records (what users read imports faces only: tests/test_layout.py) and the teaching units' (read by students)
keep the standard library's decorator. tests/test_dataclass.py holds each behaviour against the standard library's
on the same class. What this decorator does not make itself (`order`, `unsafe_hash`, `slots`, `weakref_slot`) it
leaves to `dataclasses.dataclass` whole. The API pages read it as `dataclasses.dataclass` (tools/docs_griffe.py).
"""

from __future__ import annotations

import _thread
import dataclasses
import re
import sys
from dataclasses import MISSING, FrozenInstanceError
from operator import attrgetter
from typing import ClassVar

_OWN = frozenset({"init", "repr", "eq", "frozen", "match_args", "kw_only"})  # the options made here
# The standard library's private names read here (`_FIELD`, `_FIELD_INITVAR`, `_HAS_DEFAULT_FACTORY`, a field's
# `_field_type`) are Python 3.11's, where tests/test_dataclass.py checks every behaviour against the standard
# library's; 3.12 and 3.13 define the same names alike. On any other release, or where one is missing, every record
# is the standard library's own: the same record, made more slowly (3.13's compiles its methods in one exec).
_CHECKED = (3, 11) <= sys.version_info[:2] <= (3, 13) and all(
    hasattr(dataclasses, name) for name in ("_FIELD", "_FIELD_INITVAR", "_HAS_DEFAULT_FACTORY"))
_INITVAR = getattr(dataclasses, "_FIELD_INITVAR", None)  # the marker of an InitVar pseudo-field
_HAS_DEFAULT_FACTORY = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", None)  # the default that says "call the factory"
_PLAIN = object()  # an annotation dataclasses sees at once is neither ClassVar, InitVar nor KW_ONLY (_record)
_IDENTIFIER = re.compile(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)")  # dataclasses' _MODULE_IDENTIFIER_RE


def dataclass(cls=None, /, **options):
    """`dataclasses.dataclass(cls, **options)`'s class, with its methods made as the module docstring says."""
    if cls is None:
        return lambda c: dataclass(c, **options)
    if not _CHECKED or not set(options) <= _OWN or options.get("order") or options.get("unsafe_hash"):
        return dataclasses.dataclass(cls, **options)
    return _record(cls, options.get("init", True), options.get("repr", True), options.get("eq", True),
                   options.get("frozen", False), options.get("match_args", True), options.get("kw_only", False))


def _dataclass_bases(cls) -> list:
    return [b for b in cls.__mro__[-1:0:-1] if "__dataclass_fields__" in vars(b)]


def _record(cls, init: bool, repr: bool, eq: bool, frozen: bool, match_args: bool, kw_only: bool):
    bases = _dataclass_bases(cls)
    frozen_base = any(b.__dataclass_params__.frozen for b in bases)
    if bases and frozen_base != frozen:  # dataclasses' own checks, word for word
        raise TypeError("cannot inherit non-frozen dataclass from a frozen one" if frozen_base else
                        "cannot inherit frozen dataclass from a non-frozen one")
    class_hash = cls.__dict__.get("__hash__", MISSING)
    explicit_hash = not (class_hash is MISSING or (class_hash is None and "__eq__" in cls.__dict__))
    undocumented = not cls.__dict__.get("__doc__")
    if undocumented:
        cls.__doc__ = "-"  # dataclasses would read a signature without __init__; it is written below
    # The fields, read by the standard library with no method of its own made (a frozen base's subclass has its
    # __setattr__ and __delattr__ from there: the base-class check above already passed)
    # dataclasses tests each string annotation three times (ClassVar, InitVar, KW_ONLY), a third of its time here:
    # those that name none of the three by its own rule are shown to it as a plain object, and given back after
    written = cls.__dict__.get("__annotations__", {})
    module = sys.modules.get(cls.__module__)
    plain = {name: kind for name, kind in written.items() if isinstance(kind, str) and _plain(kind, module)}
    written.update(dict.fromkeys(plain, _PLAIN))
    try:
        cls = dataclasses.dataclass(cls, init=False, repr=False, eq=False, frozen=frozen_base, match_args=match_args,
                                    kw_only=kw_only)
    finally:
        written.update(plain)
    for name in plain:
        cls.__dataclass_fields__[name].type = plain[name]
    params = cls.__dataclass_params__
    params.init, params.repr, params.eq, params.frozen = init, repr, eq, frozen
    fields = dataclasses.fields(cls)
    if init and "__init__" not in cls.__dict__:
        _init_fields(cls)  # its errors now, as dataclasses raises them, not at the first record made
        cls.__init__ = _FirstInit(cls, frozen)
    if repr:
        _add(cls, "__repr__", _repr([f.name for f in fields if f.repr]))
    if eq:
        _add(cls, "__eq__", _eq([f.name for f in fields if f.compare]))
    if frozen and not frozen_base:
        for fn in _frozen(cls, {f.name for f in fields}):
            if _add(cls, fn.__name__, fn):
                raise TypeError(f"Cannot overwrite attribute {fn.__name__} in class {cls.__name__}")
    if eq and not explicit_hash:  # dataclasses' _hash_action for unsafe_hash=False: made when frozen, else None
        if frozen:
            cls.__hash__ = _named(cls, _hash(_values([f.name for f in fields if (f.compare if f.hash is None
                                                                                   else f.hash)])))
        else:
            cls.__hash__ = None
    if undocumented:
        cls.__doc__ = cls.__name__ + _signature_text(cls)
    return cls


def _signature_text(cls) -> str:
    """What dataclasses writes after an undocumented record's name: `str(inspect.signature(cls))` without its
    " -> None", read from the fields where __init__ is not compiled yet (compiling it for that would undo
    _FirstInit), else from the class."""
    import inspect  # only for a record without a docstring, as dataclasses does

    if isinstance(cls.__dict__.get("__init__"), _FirstInit):
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        signature = inspect.Signature([inspect.Parameter(
            f.name, kinds[bool(f.kw_only)], annotation=f.type,
            default=(f.default if f.default is not MISSING else _HAS_DEFAULT_FACTORY
                     if f.default_factory is not MISSING else inspect.Parameter.empty))
            for f in _init_fields(cls)[1] if f.init], return_annotation=None)
        return str(signature).replace(" -> None", "")
    try:
        return str(inspect.signature(cls)).replace(" -> None", "")
    except (TypeError, ValueError):
        return ""


def _plain(kind: str, module) -> bool:
    """True where dataclasses' `_is_type` finds no ClassVar, InitVar or KW_ONLY in the string annotation `kind`: it
    reads the name after an optional `module.` and looks it up in the class's module (Python 3.11's rule)."""
    match = _IDENTIFIER.match(kind)
    if not match:
        return True
    named = getattr(module, "__dict__", {}).get(match.group(2))
    return not (named is ClassVar or getattr(named, "__origin__", None) is ClassVar or named is dataclasses.InitVar
                or isinstance(named, dataclasses.InitVar) or named is dataclasses.KW_ONLY)


def _named(cls, fn):
    fn.__qualname__ = f"{cls.__qualname__}.{fn.__name__}"
    return fn


def _add(cls, name: str, fn) -> bool:
    """dataclasses' _set_new_attribute: never replaces what the class defines; True where it did define it."""
    if name in cls.__dict__:
        return True
    setattr(cls, name, _named(cls, fn))
    return False


def _values(names: list):
    """The tuple of `names`' values of a record (a 1-tuple for one name, () for none), as dataclasses compares."""
    if not names:
        return lambda self: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda self: (one(self),)
    return attrgetter(*names)


def _eq(names: list):
    """The running Python's dataclasses `__eq__` over the compared fields `names`: through 3.12 their tuples compared
    (where an element is the other's own object it is equal, a NaN too); from 3.13 the record itself is equal, and
    otherwise each field's == in turn, as `and` chains them: the first false result, or the last (Lib/dataclasses.py,
    `_process_class`, 3.13.0)."""
    if sys.version_info < (3, 13):
        values = _values(names)

        def __eq__(self, other):
            if other.__class__ is self.__class__:
                return values(self) == values(other)
            return NotImplemented

        return __eq__
    getters = [attrgetter(name) for name in names]

    def __eq__(self, other):
        if self is other:
            return True
        if other.__class__ is self.__class__:
            result = True
            for get in getters:
                result = get(self) == get(other)
                if not result:
                    return result
            return result
        return NotImplemented

    return __eq__


def _hash(values):
    def __hash__(self):
        return hash(values(self))

    return __hash__


def _repr(names: list):
    running = set()  # dataclasses' _recursive_repr: a record inside itself prints as "..."
    getters = [(f"{name}=", attrgetter(name)) for name in names]

    def __repr__(self):
        key = id(self), _thread.get_ident()
        if key in running:
            return "..."
        running.add(key)
        try:
            return f"{self.__class__.__qualname__}({', '.join(label + repr(get(self)) for label, get in getters)})"
        finally:
            running.discard(key)

    return __repr__


def _frozen(cls, names: set) -> tuple:
    def __setattr__(self, name, value):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is cls or name in names:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    return __setattr__, __delattr__


class _FirstInit:
    """A record's `__init__` until it is first looked up (the first record made, `inspect.signature`, a subclass's
    `super().__init__`): then `_init` compiles it and it takes this one's place in the class. A record a run never
    makes never pays for its compilation (about 0.2 ms in a fresh interpreter)."""

    __slots__ = ("cls", "frozen")

    def __init__(self, cls, frozen: bool):
        self.cls, self.frozen = cls, frozen

    def __get__(self, obj, owner=None):
        init = self.cls.__dict__["__init__"]
        if init is self:  # else another thread compiled it first
            init = _named(self.cls, _init(self.cls, self.frozen))
            type.__setattr__(self.cls, "__init__", init)
        return init.__get__(obj, owner)


def _init_fields(cls) -> tuple:
    """The fields __init__ sets (InitVars too) in declaration order, and in its parameters' order (keyword-only
    last), with dataclasses' check that no argument without a default follows one with a default."""
    every = [f for f in cls.__dataclass_fields__.values() if f._field_type in (dataclasses._FIELD, _INITVAR)]
    ordered = [f for f in every if not f.kw_only] + [f for f in every if f.kw_only]
    seen_default = False
    for f in ordered:
        if f.init and not f.kw_only:
            if not (f.default is MISSING and f.default_factory is MISSING):
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
    return every, ordered


def _init(cls, frozen: bool):
    """dataclasses._init_fn's __init__ (Python 3.11's): the one method compiled, as it runs per record made. Its text
    leaves out the annotations (set on the function after: the same dict) and calls `object.__setattr__` by one name:
    a sixth less to compile, the same record made."""
    every, ordered = _init_fields(cls)
    self_name = "__dataclass_self__" if "self" in cls.__dataclass_fields__ else "self"
    names = {"_HAS_DEFAULT_FACTORY": _HAS_DEFAULT_FACTORY, "__dataclass_setattr__": object.__setattr__}
    body = []
    for f in every:
        default = f"_dflt_{f.name}"
        if f.default_factory is not MISSING:
            names[default] = f.default_factory
            value = f"{default}() if {f.name} is _HAS_DEFAULT_FACTORY else {f.name}" if f.init else f"{default}()"
        elif f.init:
            if f.default is not MISSING:
                names[default] = f.default
            value = f.name
        else:
            continue  # read from the class attribute that holds the default
        if f._field_type is _INITVAR:
            continue
        body.append(f"__dataclass_setattr__({self_name},{f.name!r},{value})" if frozen else
                    f"{self_name}.{f.name}={value}")
    if hasattr(cls, "__post_init__"):
        body.append(f"{self_name}.__post_init__({','.join(f.name for f in every if f._field_type is _INITVAR)})")

    def param(f) -> str:
        default = ("" if f.default is MISSING and f.default_factory is MISSING else
                   f"=_dflt_{f.name}" if f.default is not MISSING else "=_HAS_DEFAULT_FACTORY")
        return f"{f.name}{default}"

    params = [param(f) for f in ordered if f.init and not f.kw_only]
    keyword = [param(f) for f in ordered if f.init and f.kw_only]
    params = [self_name, *params, *(["*", *keyword] if keyword else [])]
    lines = "\n".join(f"  {line}" for line in body or ["pass"])
    text = f"def __create_fn__({', '.join(names)}):\n def __init__({','.join(params)}):\n{lines}\n return __init__"
    module = sys.modules.get(cls.__module__)
    space = {}
    # compiled first, then run: exec of a string runs through CPython's run_eval_code_obj (Python/pythonrun.c, 3.8 on),
    # which marks the process as ended by an unhandled Ctrl-C when its code is interrupted, even where the caller
    # catches the KeyboardInterrupt, and the interpreter then kills itself with SIGINT at exit in place of the status
    # the program chose. The first record of a kind is made mid-step, so a Ctrl-C there turned `zerosim train`'s 130
    # into a death by signal (under mpiexec: status 2, tests/test_cli_exits.py). A code object goes to PyEval_EvalCode.
    code = compile(text, "<string>", "exec")  # the file name exec gives a string
    exec(code, vars(module) if module is not None else {}, space)  # dataclasses' own way, for one method
    init = space["__create_fn__"](**names)
    init.__annotations__ = {**{f.name: f.type for f in ordered if f.init}, "return": None}
    return init
