"""The learning path (docs/tutorials/): a table of sessions, each page with its goal, what to open with the time each
takes, the questions its notebooks ask first, and questions to check yourself with their answers folded beside them.

What a student alone at night relies on, checked: every session in the table has its page and the page's time is
the table's; every notebook, command and prediction a page names exists; every notebook in notebooks/ is opened by
some session; every check-your-understanding question has an answer; every session names two or three files of the
package to read next, and every zerosim file a page names exists.
"""

import re
import shlex
from pathlib import Path

import pytest

from zerosim.cli.main import build_parser
from zerosim.teaching import QUESTIONS

ROOT = Path(__file__).resolve().parent.parent
PATH = ROOT / "docs" / "tutorials"
ROW = re.compile(r"^\| (\d+) \| \[(.+?)\]\((\d\d-[\w-]+\.md)\)(?: \(optional\))? \| (.+?) \| (\d+) min \| (.+?) \|$",
                 re.M)


def sessions() -> list:
    """(number, title, page, minutes) for every row of the path's table."""
    return [(int(n), title, PATH / page, int(minutes))
            for n, title, page, _, minutes, _ in ROW.findall((PATH / "README.md").read_text())]


def field(text: str, name: str) -> str:
    """The paragraph that starts with **name.**"""
    m = re.search(rf"^\*\*{re.escape(name)}\.\*\* (.*?)(?=\n\n|\Z)", text, re.S | re.M)
    assert m, f"no **{name}.** paragraph"
    return m.group(1)


def test_the_table_lists_every_page_in_order():
    rows = sessions()
    assert [n for n, *_ in rows] == list(range(1, len(rows) + 1)) and 6 <= len(rows) - 1 <= 8  # 6-8, one after
    assert sorted(p.name for *_, p, _ in rows) == sorted(p.name for p in PATH.glob("[0-9][0-9]-*.md"))


@pytest.mark.parametrize("n, title, page, minutes", sessions(), ids=[p.stem for _, _, p, _ in sessions()])
def test_each_session_says_its_goal_what_to_open_and_asks_with_answers(n, title, page, minutes):
    text = page.read_text()
    heading = text.splitlines()[0]
    assert heading.startswith(f"# Session {n} · ") and heading.endswith(f"({minutes} min)"), heading
    assert field(text, "Goal")
    opened = field(text, "Open")
    for notebook in re.findall(r"notebooks/([\w.]+\.ipynb)", opened):
        assert (ROOT / "notebooks" / notebook).exists(), (page.name, notebook)
    # every command it tells a learner to run parses (flags and values as `zerosim` takes them)
    for command in re.findall(r"`zerosim ([^`]+)`", text.replace("\n", " ")):
        if command.split()[0] in ("COMMAND", "exercise", "assignment"):  # placeholders and the graders' own pages
            continue
        build_parser().parse_args(shlex.split(command))
    asked = re.findall(r"\(`([a-z0-9-]+)`\)", field(text, "Predict first"))
    assert asked and set(asked) <= set(QUESTIONS), (page.name, set(asked) - set(QUESTIONS))
    check = text.split("**Check your understanding.**", 1)[1]
    questions = re.findall(r"^\d+\. ", check, re.M)
    answers = re.findall(r"<details><summary>answer</summary>.+?</details>", check, re.S)
    assert len(questions) >= 2 and len(answers) == len(questions), page.name


def test_every_notebook_is_opened_by_a_session():
    pages = [page for *_, page, _ in sessions()] + [PATH / "README.md"]  # its practice line opens the exercises
    opened = {m for page in pages for m in re.findall(r"notebooks/([\w.]+\.ipynb)", page.read_text())}
    assert opened == {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}


CODE = re.compile(r"`(zerosim/[\w/.]+)`")  # a file of the package, as a page names it: in code


@pytest.mark.parametrize("n, title, page, minutes", sessions(), ids=[p.stem for _, _, p, _ in sessions()])
def test_each_session_names_two_or_three_files_to_read_next_and_they_exist(n, title, page, minutes):
    text = page.read_text()
    named = CODE.findall(field(text, "Read next"))
    assert 2 <= len(set(named)) <= 3, (page.name, named)
    missing = [p for p in CODE.findall(text) if not (ROOT / p).is_file()]
    assert not missing, (page.name, missing)


def test_the_file_checker_sees_a_missing_file():
    text = "**Read next.** `zerosim/parallel/data/_engine.py` and `zerosim/parallel/data/_gone.py`.\n"
    assert [p for p in CODE.findall(field(text, "Read next")) if not (ROOT / p).is_file()] == \
        ["zerosim/parallel/data/_gone.py"]


def test_session_2_reads_the_reading_unit():
    text = (PATH / "02-one-zero-step.md").read_text()
    assert "zerosim/nano.py" in field(text, "Open")
    walk = text.split("**Read nano.py.**", 1)[1].split("**Read next.**", 1)[0]
    sections = re.findall(r"^\d\. \*(.+?)\*", walk, re.M)
    assert len(sections) >= 5, sections
    source = (ROOT / "zerosim" / "nano.py").read_text()
    for section in sections:  # each names what nano.py defines, in the file's order
        for name in re.findall(r"`(\w+)(?:\.\w+)?`", section):
            assert re.search(rf"^(?:def|class) {name}\b|^{name} = |^    def {name}\b", source, re.M), name
