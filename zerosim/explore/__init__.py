"""Explorers for a classroom: sliders in a notebook, and a static page for a course site.

    from zerosim.explore import MemoryExplorer, RingExplorer
    MemoryExplorer()            # model, N, stage, precision, optimizer, L, B, checkpointing, GPU -> memory and time
    RingExplorer()              # the ring on 4 ranks in fp16 / bf16: which hop rounds what

    zerosim explore --html site/explorer     # the page: a precomputed grid, no server, no Python in the browser

    settings.py          what the sliders set (a frozen Settings) and the data-less model it describes
    numbers.py           one meta-backend step of a Settings: its ledger and its timeline, as data
    memory_explorer.py   the figure (no front end needed) and the ipywidgets controls that redraw it
    ring_explorer.py     the ring reduce-scatter on real values, hop by hop
    grid.py              the page's precomputed grid (every number from numbers.py)
    page.py              the self-contained HTML page (page.html, page.js beside it)
"""

from zerosim.explore.memory_explorer import MemoryExplorer, explorer_figure
from zerosim.explore.numbers import explore
from zerosim.explore.ring_explorer import RingExplorer, ring_hops
from zerosim.explore.settings import Settings

__all__ = ["MemoryExplorer", "RingExplorer", "Settings", "explore", "explorer_figure", "ring_hops"]
