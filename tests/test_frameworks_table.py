"""docs/frameworks.md, the one table of what zerosim says it does as DeepSpeed / torch / torchao / Transformer
Engine / NCCL do (issue 33, Build 4): every claim row names a release and a file and function; every docs section
and notebook that speaks of a framework names a release itself, links to the table, or is listed in the table's
"Where the claims are stated" (with rows that exist); features a later release removed are labelled where users
pick them. A new claim without a version fails here."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "frameworks.md"
FRAMEWORKS = r"DeepSpeed|torch|torchao|Transformer Engine|NCCL|transformers|Megatron-LM"
RELEASE = re.compile(rf"^({FRAMEWORKS}) (\d+\.\d+(\.\d+)?)$")
SOURCE = re.compile(r"^`[\w./+-]+\.(py|cu|cuh|h|hpp|cc|cpp): [\w:.]+`(, `[\w:.]+`)*$")  # `path/file.ext: function`
# a framework named in prose (what a section must cite); "torch" alone only as a word, not torch.xyz code
NAMED = re.compile(r"\b(DeepSpeed|FSDP2?|DDP|ZeroRedundancyOptimizer|DCP|torchao|Transformer Engine|NCCL|gloo|"
                   r"PyTorch|torch|Megatron(-LM)?)\b(?![./_\w])")
CITES = re.compile(rf"\b({FRAMEWORKS}|PyTorch|TE) v?\d+\.\d+|frameworks\.md")
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")), "course/README.md"]


def _section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"docs/frameworks.md has no section '## {title}'"
    return m.group(1)


def _rows(title: str, cells: int) -> list:
    out = []
    for line in _section(TABLE.read_text(), title).splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            row = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(row) == cells, f"{title}: a row of {len(row)} cells, not {cells}: {line}"
            out.append(row)
    return out[1:]  # the header


CLAIMS = _rows("The claims", 6)
RELEASES = {(r[0], v.strip()) for r in _rows("The releases read", 3) for v in re.sub(r"\(.*?\)", "", r[1]).split(",")}


def test_the_table_has_the_claims():
    assert len(CLAIMS) >= 40
    ids = [r[0] for r in CLAIMS]
    assert len(ids) == len(set(ids)) and all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", i) for i in ids)


@pytest.mark.parametrize("row", CLAIMS, ids=[r[0] for r in CLAIMS])
def test_every_claim_row_has_a_release_a_file_and_a_function(row):
    rid, claim, release, where, differ, ours = row
    assert claim and claim != "-", rid
    m = RELEASE.match(release)
    assert m, f"{rid}: the release {release!r} is not 'Framework X.Y[.Z]'"
    assert (m.group(1), m.group(2)) in RELEASES, f"{rid}: {release} is not in 'The releases read'"
    for part in where.split("; "):
        assert SOURCE.match(part), f"{rid}: {part!r} is not `path/file.ext: function`"
    assert differ, rid
    for path in re.findall(r"`([\w/]+\.py)", ours):
        assert (ROOT / "zerosim" / path).exists(), f"{rid}: zerosim/{path} does not exist"


def test_removed_features_name_the_release_that_removed_them():
    rows = {r[0]: r for r in CLAIMS}
    assert rows["ds-mics"][2] == "DeepSpeed 0.19.6" and "removed in 0.19.7" in rows["ds-mics"][4]
    assert rows["ds-loco"][2] == "DeepSpeed 0.19.7" and "removed in 0.19.8" in rows["ds-loco"][4]
    assert "0.19.6, 0.19.7" in rows["ds-bucket-dtype"][4]


def _stated() -> dict:
    """'file › heading' or 'notebook' -> the row ids listed for it."""
    out = {}
    for line in _section(TABLE.read_text(), "Where the claims are stated").splitlines():
        if line.startswith("- "):
            where, ids = line[2:].rsplit(": ", 1)
            out[where] = [i.strip() for i in ids.split(",")]
    return out


def test_every_stated_place_lists_rows_that_exist():
    ids = {r[0] for r in CLAIMS}
    for where, listed in _stated().items():
        assert listed and set(listed) <= ids, f"{where}: {set(listed) - ids}"


def _sections(text: str):
    title, body = "(top)", []
    for line in text.splitlines():
        m = re.match(r"#{1,4} (.*)", line)
        if m:
            yield title, "\n".join(body)
            title, body = m.group(1).strip(), []
        else:
            body.append(line)
    yield title, "\n".join(body)


def _speaking_of_frameworks():
    """Every docs section and every notebook (its markdown) that names a framework."""
    for doc in DOCS:
        if doc == "docs/frameworks.md":
            continue
        for title, body in _sections((ROOT / doc).read_text()):
            if NAMED.search(re.sub(r"`[^`]*`", "", body)):
                yield f"{doc} › {title}", body
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        md = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        if NAMED.search(re.sub(r"`[^`]*`", "", md)):
            yield f"notebooks/{nb.name}", md


def test_every_section_that_speaks_of_a_framework_is_tied_to_the_table():
    stated = _stated()
    loose = [where for where, body in _speaking_of_frameworks() if where not in stated and not CITES.search(body)]
    assert not loose, ("these name a framework's behaviour without a release, a link to docs/frameworks.md, or a "
                       f"line in its 'Where the claims are stated': {loose}")


def test_no_stated_place_is_stale():
    present = {where for where, _ in _speaking_of_frameworks()}
    assert set(_stated()) <= present, set(_stated()) - present


def test_a_claim_without_a_version_fails_this_check():
    """The check above can fail: a new section naming DeepSpeed, with no release and no line in the table's list."""
    text = "## A new section\n\nzerosim pads as DeepSpeed does.\n"
    assert any(NAMED.search(body) and not CITES.search(body) for _, body in _sections(text))
    assert CITES.search("as DeepSpeed 0.19.8 does") and CITES.search("(see docs/frameworks.md)")


def test_the_removed_features_are_labelled_where_users_pick_them(capsys):
    from zerosim.cli.main import main
    from zerosim.frameworks.deepspeed._keys import ZERO
    from zerosim.parallel.data import STRATEGIES
    from zerosim.parallel.data.zeropp import LocoParams, Wire

    for name in ("mics", "mics_hierarchical"):
        assert "DeepSpeed <= 0.19.6" in STRATEGIES[name].release, name
    with pytest.raises(SystemExit):
        main(["memory", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "mics (DeepSpeed <= 0.19.6)" in shown and "mics_hierarchical (DeepSpeed <= 0.19.6)" in shown
    assert "DeepSpeed <= 0.19.7" in Wire(zero_quantized_gradients=True, loco=LocoParams()).describe()
    assert "DeepSpeed <= 0.19.7" in (LocoParams.__doc__ or "")
    for key, release in (("mics_shard_size", "<= 0.19.6"), ("mics_hierarchical_params_gather", "<= 0.19.6"),
                         ("zeropp_loco_param", "<= 0.19.7")):
        assert f"DeepSpeed {release}" in ZERO[key][3], key
