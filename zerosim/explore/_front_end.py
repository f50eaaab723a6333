"""Whether an explorer has a front end to draw its widgets in, or shows its drawn figure instead.

Live widgets need a kernel with a front end (Jupyter). Run headless (nbclient, as tests/test_notebooks.py runs
the notebooks), an Output widget's captured display can leave the client waiting for a reply that never comes
(jupyter/nbclient#312, open): the notebook tests set ZEROSIM_STATIC_WIDGETS=1, and the explorers then build the
same controls and numbers but show the figure and the text as plain outputs.
"""

from __future__ import annotations

import os

STATIC = "ZEROSIM_STATIC_WIDGETS"


def live() -> bool:
    """True in a kernel whose outputs go to a front end that draws widgets."""
    from IPython import get_ipython

    return get_ipython() is not None and os.environ.get(STATIC, "") in ("", "0")



def draw_into(output, figure) -> None:
    """Put `figure` into an explorer's Output widget, replacing the last one (live only: headless, `show` does)."""
    from IPython.display import display

    if not live():
        return
    with output:
        output.clear_output(wait=True)
        display(figure)


def show(widget, html: str, figure) -> None:
    """An explorer's `_ipython_display_`: the live widget, or headless the same text and figure as plain outputs."""
    from IPython.display import HTML, display

    if live():
        display(widget)
    else:
        display(HTML(html), figure)
