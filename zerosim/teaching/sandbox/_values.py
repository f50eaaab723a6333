"""What crosses between the grader and the child: values as data, never as code or as a verdict.

    Values(handles).dump(value) -> JSON-ready data;  Values(handles).load(data) -> the value again

The grader hands the learner's function its arguments and gets back what it returned; the child never says whether
that is right (the grader judges, _run.py's module docstring says why). What may cross, each way:

- None, bool, int, float (NaN, ±inf and -0.0 kept: Python's json writes them as NaN, Infinity, -0.0), str;
- lists, tuples and dicts (keys: any value here that hashes) of these, at most `DEPTH` deep;
- NumPy arrays and scalars of the dtypes in `DTYPES`, bit for bit (base64 of their bytes, C order), and the dtypes
  and scalar types themselves (assignment 1's `wire` is `np.float16` or `ml_dtypes.bfloat16`);
- from the grader only, a *handle*: a function or an object of a kind the caller lists (a ledger Buffer), which the
  child sees as a stand-in whose calls and listed attributes come back to the grader (`Remote`).

Arrays keep who they are across the pipe: every array the grader sends carries a token, the child makes one array
of it and gives that same array for the same token, and when the child sends that array back (or before any message
it sends, when its contents changed) the grader writes the new contents into its own array and gets its own array
back. So writing into an argument in place (assignment 2's `refresh`) and passing on an array read from a buffer
(stage2_free's use-after-free check compares memory) behave as if the learner's code ran in the grader. A loaded
value is always new memory: nothing here builds a view of the grader's memory from numbers the child sent.

Anything else (a learner's own class, a generator, a module) does not cross: `Unsendable` names its type. Malformed
data from the child (it may be anything: the learner's code can write on its own pipe) raises `Malformed`.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np

DEPTH = 32  # nesting a value may have: a list of lists of arrays is 3
# the dtypes an array or scalar may have: every number format an exercise hands out or gets back
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64", "bfloat16")


class Unsendable(TypeError):
    """A value of a type that does not cross (its type named)."""


class Malformed(ValueError):
    """Data that is not a value this module writes."""


@dataclass(frozen=True)
class Remote:
    """What the child may do with a handle of one kind: read `attrs`, call `methods` (all through the grader)."""

    attrs: tuple = ()
    methods: tuple = ()


def dtype_of(name) -> np.dtype:
    """The dtype called `name`, one of DTYPES (bfloat16 is ml_dtypes', imported only when asked for)."""
    if name not in DTYPES:
        raise Malformed(f"dtype {name!r} does not cross (one of {', '.join(DTYPES)})")
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _name_of(dtype: np.dtype) -> str:
    name = dtype.name
    if name not in DTYPES or dtype.byteorder == ">":  # bfloat16's name is "bfloat16": ml_dtypes registers it so
        raise Unsendable(f"a NumPy array of dtype {dtype} (one of {', '.join(DTYPES)} crosses)")
    return name


def _bytes(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def _array(data: dict) -> np.ndarray:
    """A new, writable array from {"dtype", "shape", "data"}; Malformed unless the bytes are exactly the shape's."""
    if not isinstance(data, dict):
        raise Malformed("an array is an object")
    dtype = dtype_of(data.get("dtype"))
    shape = data.get("shape")
    if not (isinstance(shape, list) and len(shape) <= DEPTH
            and all(type(n) is int and 0 <= n < 1 << 40 for n in shape)):
        raise Malformed(f"an array's shape is a list of sizes, got {shape!r}")
    try:
        raw = base64.b64decode(data.get("data", ""), validate=True)
    except (ValueError, TypeError):
        raise Malformed("an array's data is base64") from None
    size = 1
    for n in shape:
        size *= n
    if len(raw) != size * dtype.itemsize:
        raise Malformed(f"an array of shape {tuple(shape)} and dtype {dtype} has {size * dtype.itemsize} bytes, "
                        f"not {len(raw)}")
    return np.frombuffer(raw, dtype).reshape(shape).copy()


class Values:
    """One side's coding of values for one call: the arrays it gave out by token, the handles it lent.

    `handles`: {type: Remote} (the grader's side: which objects may be lent, and what the child may do with them);
    `proxy(rid, kind, remote)`: the child's side, the stand-in it makes for a handle."""

    def __init__(self, handles: dict | None = None, proxy=None):
        self.handles, self.proxy = handles or {}, proxy
        self.tokens: dict = {}  # token -> array (the grader's own; on the child's side, the one made of it)
        self.synced: dict = {}  # token -> bytes last sent or received (the child's side: what changed since)
        self.lent: dict = {}  # handle id -> (object, kind name, Remote): the grader's side
        self.stand_ins: dict = {}  # handle id -> stand-in: the child's side

    # -- writing ----------------------------------------------------------------------------------------------------
    def dump(self, value, depth: int = 0):
        if depth > DEPTH:
            raise Unsendable(f"a value nested more than {DEPTH} deep")
        if value is None or isinstance(value, (bool, str)) or type(value) in (int, float):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, np.generic):  # an int or float subclass: plainly
            return int(value) if isinstance(value, int) else float(value)
        if isinstance(value, np.ndarray):
            return self._dump_array(value)
        if isinstance(value, np.generic):
            return {"scalar": {"dtype": _name_of(value.dtype), "data": _bytes(np.asarray(value))}}
        if isinstance(value, np.dtype):
            return {"dtype": _name_of(value)}
        if isinstance(value, type) and issubclass(value, np.generic):
            return {"type": _name_of(np.dtype(value))}
        if isinstance(value, tuple):
            return {"tuple": [self.dump(v, depth + 1) for v in value]}
        if isinstance(value, list):  # a list's subclass (a collective's result with its .handle) as a list
            return {"list": [self.dump(v, depth + 1) for v in value]}
        if isinstance(value, dict):
            return {"dict": [[self.dump(k, depth + 1), self.dump(v, depth + 1)] for k, v in value.items()]}
        for rid, stand_in in self.stand_ins.items():  # the child passing a handle back
            if stand_in is value:
                return {"remote": rid}
        return self._lend(value)

    def _dump_array(self, a: np.ndarray) -> dict:
        out = {"dtype": _name_of(a.dtype), "shape": list(a.shape), "data": _bytes(a)}
        if self.proxy is None:  # the grader's: a token, so that the child keeps one array for it
            self.tokens[id(a)] = a
            out["token"] = id(a)
            return {"array": out}
        for token, mine in self.tokens.items():  # the child's: the array made of a token goes back as that token
            if mine is a:
                return {"ref": token}
        return {"array": out}

    def _lend(self, value):
        kind = next((k for k in type(value).__mro__ if k in self.handles), None)
        if self.proxy is not None or (kind is None and not callable(value)):
            raise Unsendable(f"a {type(value).__name__} (numbers, strings, lists, tuples, dicts and NumPy arrays "
                             "cross)")
        remote = self.handles[kind] if kind is not None else Remote(methods=("__call__",))
        self.lent[id(value)] = (value, kind.__name__ if kind is not None else "function", remote)
        return {"remote": id(value), "kind": self.lent[id(value)][1], "attrs": list(remote.attrs),
                "methods": list(remote.methods)}

    def changes(self) -> dict:
        """The child's side: {token: array data} for every array given out whose contents changed since it was
        last sent or received (written before each message, so the grader always reads what the learner wrote)."""
        out = {}
        for token, a in self.tokens.items():
            now = a.tobytes()
            if now != self.synced.get(token):
                self.synced[token] = now
                out[str(token)] = {"dtype": _name_of(a.dtype), "shape": list(a.shape), "data": _bytes(a)}
        return out

    # -- reading ----------------------------------------------------------------------------------------------------
    def load(self, data, depth: int = 0):
        if depth > DEPTH:
            raise Malformed(f"a value nested more than {DEPTH} deep")
        if data is None or isinstance(data, (bool, int, float, str)):
            return data
        if not (isinstance(data, dict) and len(data) >= 1):
            raise Malformed(f"not a value: {type(data).__name__}")
        tag = next(iter(data))
        body = data[tag]
        if tag in ("list", "tuple"):
            if not isinstance(body, list):
                raise Malformed(f"a {tag} is a list")
            items = [self.load(v, depth + 1) for v in body]
            return items if tag == "list" else tuple(items)
        if tag == "dict":
            if not (isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body)):
                raise Malformed("a dict is a list of pairs")
            try:
                return {self.load(k, depth + 1): self.load(v, depth + 1) for k, v in body}
            except TypeError as e:  # an unhashable key
                raise Malformed(f"a dict's key: {e}") from None
        if tag == "array":
            return self._load_array(body)
        if tag == "ref":
            return self._load_ref(body)
        if tag == "scalar":
            return _array({**body, "shape": []})[()] if isinstance(body, dict) else _array(body)
        if tag == "dtype":
            return dtype_of(body)
        if tag == "type":
            return dtype_of(body).type
        if tag == "remote":
            return self._load_remote(data)
        raise Malformed(f"not a value: {tag!r}")

    def _load_array(self, body) -> np.ndarray:
        a = _array(body)
        token = body.get("token")
        if self.proxy is None or token is None:  # the grader never takes a token from the child
            return a
        if type(token) is not int:
            raise Malformed("a token is a number")
        mine = self.tokens.get(token)
        if mine is not None and mine.shape == a.shape and mine.dtype == a.dtype:
            np.copyto(mine, a)  # the grader's contents are the newer: it has read every change the child sent
            a = mine
        self.tokens[token] = a
        self.synced[token] = a.tobytes()
        return a

    def _load_ref(self, token):
        """The grader's side: its own array for a token it gave out."""
        if self.proxy is not None or type(token) is not int or token not in self.tokens:
            raise Malformed(f"no array was given out as {token!r}")
        return self.tokens[token]

    def apply(self, changes) -> None:
        """The grader's side: the child's changed arrays written into the grader's own (`changes()`'s data)."""
        if not isinstance(changes, dict):
            raise Malformed("changes are an object")
        for token, body in changes.items():
            mine = self.tokens.get(int(token)) if str(token).isdigit() else None
            if mine is None:
                raise Malformed(f"no array was given out as {token!r}")
            new = _array(body)
            if new.shape != mine.shape or new.dtype != mine.dtype:
                raise Malformed(f"array {token} changed shape or dtype")
            if mine.flags.writeable:
                np.copyto(mine, new)

    def _load_remote(self, data: dict):
        rid = data.get("remote")
        if type(rid) is not int:
            raise Malformed("a handle is a number")
        if self.proxy is None:  # the grader's side: one of its own lent objects, passed back
            if rid not in self.lent:
                raise Malformed(f"no handle {rid} was lent")
            return self.lent[rid][0]
        if rid not in self.stand_ins:
            remote = Remote(tuple(data.get("attrs", ())), tuple(data.get("methods", ())))
            self.stand_ins[rid] = self.proxy(rid, str(data.get("kind")), remote)
        return self.stand_ins[rid]

    def handle(self, rid, op: str, name: str):
        """The grader's side: the lent object behind `rid`, checked against what its kind allows (`op`: "get" an
        attribute of Remote.attrs, "call" a method of Remote.methods)."""
        if type(rid) is not int or rid not in self.lent:
            raise Malformed(f"no handle {rid!r} was lent")
        value, kind, remote = self.lent[rid]
        allowed = remote.attrs if op == "get" else remote.methods if op == "call" else ()
        if name not in allowed:
            raise Malformed(f"a {kind} lent to a solution allows {op} of {', '.join(allowed) or 'nothing'}, "
                            f"not {name!r}")
        return value
