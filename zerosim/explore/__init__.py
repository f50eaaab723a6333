"""Explorers for a classroom: sliders in a notebook, and a static page for a course site.

    from zerosim.explore import MemoryExplorer, RingExplorer
    MemoryExplorer()            # model, N, stage, precision, optimizer, L, B, checkpointing, GPU -> memory and time
    RingExplorer()              # the ring on 4 ranks in fp16 / bf16: which hop rounds what

    zerosim explore --html site/explorer     # the page: every setting's CLI numbers, looked up, no server

    _settings.py   what the sliders set (a frozen Settings) and the data-less model it describes
    _numbers.py    one meta-backend step of a Settings: its ledger and its timeline, as data
    _memory.py     the figure (no front end needed) and the ipywidgets controls that redraw it
    _canvas.py     the figure built once and moved to each new setting
    _text_raster.py each text's pixels kept and pasted when it is drawn again at its place
    _front_end.py  whether there is a front end to draw widgets in
    _ring.py       the ring reduce-scatter on real values, hop by hop
    _grid.py       the page's settings as a grid, each point's numbers the CLI's --json (compiled into grid.json)
    _page.py       the self-contained HTML page (page.html, page.js: it looks a setting up and draws it)
"""

from zerosim.explore._canvas import ExplorerCanvas
from zerosim.explore._grid import AXES, argv, compile_grid, pack, points
from zerosim.explore._memory import MemoryExplorer, explorer_figure
from zerosim.explore._numbers import explore
from zerosim.explore._page import page_data, shipped_grid, step_frames, write_page
from zerosim.explore._ring import RingExplorer, hop_lines, ring_hops
from zerosim.explore._settings import Settings, model_for

__all__ = ["AXES", "ExplorerCanvas", "MemoryExplorer", "RingExplorer", "Settings", "argv", "compile_grid", "explore",
           "explorer_figure", "hop_lines", "model_for", "pack", "page_data", "points", "ring_hops", "shipped_grid",
           "step_frames", "write_page"]
