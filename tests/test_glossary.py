"""The glossary (zerosim/viz/_glossary.py) is docs/glossary.md, every ledger kind an engine allocates has an entry, and
the outputs that use a term point to it."""

import re
from pathlib import Path

import pytest

from zerosim.viz import glossary, kind_label

ROOT = Path(__file__).resolve().parent.parent


def test_docs_glossary_is_written_from_the_package():
    assert (ROOT / "docs" / "glossary.md").read_text() == glossary.markdown() + "\n", \
        "docs/glossary.md is stale: python -c 'from zerosim.viz import glossary; print(glossary.markdown())' > it"


@pytest.mark.parametrize("kind", ["params", "grads", "grad32", "master", "optim:m", "optim:v", "optim:n",
                                  "optim:g_prev", "optim:b", "activations", "comm", "scratch"])
def test_every_ledger_kind_has_an_entry_and_an_anchor_in_the_page(kind):
    entry = glossary.get(kind)
    # the anchor of "### {term}" as GitHub makes it (punctuation out, each space a hyphen) and as MkDocs'
    # Python-Markdown does (runs of spaces and hyphens one hyphen): the same for every term here
    github = re.sub(r"[^\w\s-]", "", entry.term).lower().replace(" ", "-")
    mkdocs = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", entry.term).strip().lower())
    assert entry.anchor == github == mkdocs
    assert kind_label(kind)


def test_grad32_is_not_called_a_shard_where_stage_0_holds_it_whole():
    assert "whole padded buffer Ψ at stage 0" in glossary.get("grad32").text
    assert "shard" not in kind_label("grad32")


def test_the_outputs_that_use_the_terms_point_to_the_glossary(capsys):
    from zerosim.cli.main import main

    assert main(["memory", "--params", "1e9", "--ranks", "8"]) == 0
    assert "docs/glossary.md" in capsys.readouterr().out
    assert glossary.link("grad32") == "docs/glossary.md#grad32"
    with pytest.raises(KeyError, match="no glossary entry for 'nonsense'"):
        glossary.get("nonsense")
