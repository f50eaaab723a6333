"""Explorers for a classroom: sliders in a notebook, and a static page for a course site.

    from zerosim.explore import MemoryExplorer, RingExplorer
    MemoryExplorer()            # model, N, stage, precision, optimizer, L, B, checkpointing, GPU -> memory and time
    RingExplorer()              # the ring on 4 ranks in fp16 / bf16: which hop rounds what

    zerosim explore --html site/explorer     # the page: every setting computed in the browser, no server

    _settings.py   what the sliders set (a frozen Settings) and the data-less model it describes
    _numbers.py    one meta-backend step of a Settings: its ledger and its timeline, as data
    _memory.py     the figure (no front end needed) and the ipywidgets controls that redraw it
    _canvas.py     the figure built once and moved to each new setting
    _text_raster.py each text's pixels kept and pasted when it is drawn again at its place
    _front_end.py  whether there is a front end to draw widgets in
    _ring.py       the ring reduce-scatter on real values, hop by hop
    _compile.py    a model's step compiled once into coefficients of (B·L, B·L², B·L·T, B, 1) per op (steps.json)
    _closed.py     the explorer's numbers from a compiled step at any N, B, L: _numbers.py's without the engine
    _page.py       the self-contained HTML page (page.html, page.js: _closed.py in JavaScript)
"""

from zerosim.explore._canvas import ExplorerCanvas
from zerosim.explore._closed import closed_form
from zerosim.explore._compile import compile_all, compile_model
from zerosim.explore._memory import MemoryExplorer, explorer_figure
from zerosim.explore._numbers import explore
from zerosim.explore._page import page_data, shipped_steps, step_frames, write_page
from zerosim.explore._ring import RingExplorer, hop_lines, ring_hops
from zerosim.explore._settings import Settings, model_for

__all__ = ["ExplorerCanvas", "MemoryExplorer", "RingExplorer", "Settings", "closed_form", "compile_all",
           "compile_model", "explore", "explorer_figure", "hop_lines", "model_for", "page_data", "ring_hops",
           "shipped_steps", "step_frames", "write_page"]
