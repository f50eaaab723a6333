"""The ring on real values: 4 ranks reduce-scatter in fp16 or bf16, and every hop says what it rounded.

    from zerosim.explore import RingExplorer, ring_hops
    RingExplorer()                                   # sliders: rank 0's value, the others' value, the format
    ring_hops(big=2048, small=1, fmt="fp16")         # the same, as rows

Rank 0 holds `big` in every element, ranks 1..N-1 hold `small` (notebook 02's 2048 + 1 + 1 + 1 when big = 2048,
small = 1). The ring is zerosim's own (collectives/_calls.py reduce_scatter on a cluster that keeps the values it
sent); each row is one hop's add at the receiver: the partial it received + its own value = the exact sum (float64:
two values of at most 24 significant bits add exactly) → what the wire format kept. A row whose kept value differs
from the exact sum is where the ring rounded.
"""

from __future__ import annotations

import numpy as np

from zerosim.explore._front_end import draw_into, show

FORMATS = ("fp16", "bf16")


def ring_hops(big: float = 2048.0, small: float = 1.0, fmt: str = "fp16", ranks: int = 4) -> dict:
    """{"rows": [{"step", "src", "dst", "chunk", "received", "own", "exact", "kept", "rounded"}], "result": [chunk
    sums as the ring left them], "exact": [float64 sums], "inputs": the arrays, "trace", "outputs"} (see above)."""
    from zerosim.cluster import Cluster
    from zerosim.collectives import reduce_scatter
    from zerosim.precision import get_format

    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    dtype = get_format(fmt).dtype
    x = [np.full(ranks, big, dtype)] + [np.full(ranks, small, dtype) for _ in range(ranks - 1)]  # (N,) per rank
    cluster = Cluster(ranks, keep_values=True)
    out = reduce_scatter(cluster, x)
    sent = {(e.step, e.src): e for e in cluster.trace.events if e.call == 0}
    last = max(step for step, _ in sent)
    rows = []
    for (step, src), e in sorted(sent.items()):
        dst, c = e.dst, e.chunk
        received = float(np.asarray(e.values, np.float64)[0])
        own = float(np.float64(x[dst][c]))
        # what dst kept: the partial it sends on at the next step, or, after the last step, the shard it owns
        kept = float(np.asarray(sent[(step + 1, dst)].values, np.float64)[0]) if step < last else float(out[dst][0])
        exact = received + own
        rows.append({"step": step, "src": src, "dst": dst, "chunk": c, "received": received, "own": own,
                     "exact": exact, "kept": kept, "rounded": kept != exact})
    return {"rows": rows, "result": [float(o[0]) for o in out],
            "exact": [float(np.float64(big) + (ranks - 1) * np.float64(small))] * ranks,
            "inputs": x, "outputs": out, "trace": cluster.trace}


def hop_lines(h: dict) -> list:
    """One line per hop: 'step k  rank s → rank d  chunk c:  r + o = exact → kept   ROUNDED'."""
    return [f"step {r['step']}  rank {r['src']} → rank {r['dst']}  chunk {r['chunk']}:  {r['received']:g} + "
            f"{r['own']:g} = {r['exact']:g}" + (f" → {r['kept']:g}   rounded" if r["rounded"] else "")
            for r in h["rows"]]


class RingExplorer:
    """Sliders for rank 0's value and the others', a toggle for the format; redraws the ring figure (red where a
    hop rounded) and the hop list. `hops` is the last `ring_hops` drawn; `controls` {name: widget}."""

    def __init__(self, big: float = 2048.0, small: float = 1.0, fmt: str = "fp16"):
        import ipywidgets as w

        self.controls = {
            "big": w.FloatLogSlider(value=big, base=2, min=0, max=15, step=1, description="rank 0 holds"),
            "small": w.FloatSlider(value=small, min=0.25, max=8, step=0.25, description="ranks 1-3 hold"),
            "fmt": w.ToggleButtons(options=FORMATS, value=fmt, description="wire format"),
        }
        self.output, self.text = w.Output(), w.HTML()
        self.hops, self.figure = None, None
        for c in self.controls.values():
            c.observe(lambda _change: self.redraw(), names="value")
        self.widget = w.VBox([w.HBox(list(self.controls.values())), self.text, self.output])
        self.redraw()

    def redraw(self) -> None:
        from matplotlib.figure import Figure

        from zerosim.viz import ring_figure

        v = {k: c.value for k, c in self.controls.items()}
        self.hops = ring_hops(v["big"], v["small"], v["fmt"])
        self.figure = Figure(figsize=(11, 4.6), dpi=100)
        ring_figure(self.hops["trace"], 0, inputs=self.hops["inputs"], outputs=self.hops["outputs"],
                    ax=self.figure.subplots())
        self.text.value = "<pre>" + "\n".join(hop_lines(self.hops)) + f"\nring: {self.hops['result']}   exact: " \
                          f"{self.hops['exact']}</pre>"
        draw_into(self.output, self.figure)

    def _ipython_display_(self):
        show(self.widget, self.text.value, self.figure)
