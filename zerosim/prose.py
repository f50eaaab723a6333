"""The width a report's prose wraps at, and the one way it wraps: between words, never inside a word or at a hyphen,
the lines after the first at an indent. Tables, commands and one-line records (a collective's hop, a diff's event)
keep their own lines; the words around them fit a terminal of 120 columns."""

from __future__ import annotations

import textwrap

WIDTH = 116


def wrap(text: str, indent: str = "", width: int = WIDTH) -> list:
    """`text` as lines of at most `width` columns (a word longer than that keeps its own line), those after the first
    starting with `indent`; a leading indent of `text` stays on its first line."""
    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)
