"""One colour per memory kind, per number format and per ring chunk, for every figure zerosim draws.

A learner who sees the fp32 master in orange in one figure must find it orange in the next, so no
figure picks its own colours: each asks `kind_colour(kind)` (ledger kinds, cluster/_ledger.py) or
`format_colour(name)`. Every artist a figure draws for a memory kind carries the gid
`"kind:<kind>"`, so tests can check the colours a figure really used (tests/test_figures.py).

Seed 001's notation groups the kinds: W (the compute-format params), G (the gradients), OS (the
optimizer states: fp32 master, m and v). W is blue, G light blue and teal, OS warm.
"""

from __future__ import annotations

import zlib

# kind -> (label, colour); labels name the kind in words, with seed 001's letter where it has one
KINDS = {
    "params": ("W: params (compute copy)", "#4c72b0"),
    "grads": ("G: grads (compute / wire format)", "#8fb0e0"),
    "grad32": ("fp32 gradient (for the step)", "#2a9d8f"),  # the shard, or stage 0's whole
    "master": ("OS: fp32 master params", "#dd8452"),
    "optim:m": ("OS: optimizer m", "#c44e52"),
    "optim:v": ("OS: optimizer v", "#e59a9c"),
    "optim:n": ("OS: optimizer n", "#8172b3"),
    "optim:g_prev": ("OS: previous gradient", "#937860"),
    "optim:b": ("OS: momentum buffer", "#da8bc3"),
    "activations": ("activations (saved for backward)", "#ccb974"),
    "comm": ("communication staging", "#8c8c8c"),
    "scratch": ("update scratch", "#a6761d"),
    "secondary": ("W': secondary params piece (hpZ, FSDP2 reshard to a group)", "#64b5cd"),
}
# kinds no engine uses yet still get one fixed colour each (chosen by a hash of the name, not by order)
SPARE = ("#17becf", "#bcbd22", "#7f7f7f", "#9467bd", "#8c564b", "#e377c2")
ORDER = tuple(KINDS)  # stacking order: W, G, OS, then what comes and goes

FORMATS = {  # number formats: the spacing and dataflow figures
    "fp64": "#000000",
    "fp32": "#dd8452",  # the master's format takes the master's colour
    "bf16": "#55a868",
    "fp16": "#4c72b0",  # the compute copy's format takes the params' colour
    "fp8_e4m3": "#c44e52",
    "fp8_e5m2": "#8172b3",
}
WIRES = {  # what travels in a gather or a reduction (viz/_wire.py): the same colour in every figure of the wires
    "float64": "#000000",  # the exact yardstick, as the fp64 format
    "unquantized": "#4c72b0",  # the 16-bit wire, as the params' colour
    "qwZ int8": "#55a868",
    "fp8 torchao": "#c44e52",  # e4m3, as the fp8_e4m3 format
    "fp8 delayed": "#8172b3",
    "mxfp8": "#937860",
    "qgZ int4": "#dd8452",
    "qgZ int4 + LoCo": "#da8bc3",
}
CHUNKS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
TIERS = {"intra-node": "#66a61e", "inter-node": "#6a3d9a"}  # NVLink within a node, InfiniBand across: no kind's colour
PEAK_TICK = "black"  # the tick that marks a peak, wherever one is drawn
# a value rounding lost (2049 -> 2048), wherever one is marked: magenta, far from every chunk's and format's colour (a
# red once meant both "chunk 3" and "fp16 changed this sum" in ring_steps.png, and both fp8 and "lost" in spacing.png)
LOSS = "#d400d4"


def kind_colour(kind: str) -> str:
    """The colour of ledger kind `kind` in every figure."""
    if kind in KINDS:
        return KINDS[kind][1]
    return SPARE[zlib.crc32(kind.encode()) % len(SPARE)]


def kind_label(kind: str) -> str:
    """The legend label of ledger kind `kind`."""
    if kind in KINDS:
        return KINDS[kind][0]
    return kind.replace("optim:", "OS: optimizer ")


def kind_order(kinds) -> list:
    """`kinds` in stacking order: W, G, OS, transients; unknown kinds last, by name."""
    kinds = set(kinds)
    return [k for k in ORDER if k in kinds] + sorted(kinds - set(ORDER))


def format_colour(name: str) -> str:
    """The colour of a number format ("fp32", "bf16", "fp16", "fp8_e4m3", ...)."""
    return FORMATS.get(name, SPARE[zlib.crc32(name.encode()) % len(SPARE)])


def wire_colour(name: str) -> str:
    """The colour of a wire ("unquantized", "qwZ int8", "qgZ int4 + LoCo", ...; WIRES) in every figure."""
    if name not in WIRES:
        raise ValueError(f"no colour for wire {name!r}; the wires are {', '.join(WIRES)}")
    return WIRES[name]


def chunk_colour(chunk: int) -> str:
    """The colour of ring chunk `chunk` (chunk c is owned by rank c)."""
    return CHUNKS[chunk % len(CHUNKS)]
