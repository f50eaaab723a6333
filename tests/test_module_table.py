"""tests/MODULES.md finds the tests of every module: each module of zerosim/ has a row, each test file it names exists.

(Tests are named by the claim they check, not by module; the table is the index. A module added without a
row, or a test file renamed under a row, fails here with the module's or the file's name.)
"""

import re
from pathlib import Path

TESTS = Path(__file__).parent
PACKAGE = TESTS.parent / "zerosim"
ROW = re.compile(r"^\| `(zerosim/[^`]+\.py)` \| (.+) \|$")


def table(text: str) -> dict:
    """{module path: [test files]} from the table's rows."""
    rows = {}
    for line in text.splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = re.findall(r"`([^`]+)`", m.group(2))
    return rows


def modules() -> list:
    return sorted(p.relative_to(PACKAGE.parent).as_posix() for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def problems(rows: dict, mods: list, tests: Path) -> list:
    out = [f"{m}: no row in tests/MODULES.md" for m in mods if m not in rows]
    out += [f"{m}: names {t}, which is not in tests/" for m, ts in rows.items() for t in ts if not (tests / t).exists()]
    out += [f"{m}: a row for a module that does not exist" for m in rows if m not in mods]
    out += [f"{m}: a row with no test" for m, ts in rows.items() if not ts]
    return out


def test_every_module_has_a_row_of_test_files_that_exist():
    assert problems(table((TESTS / "MODULES.md").read_text()), modules(), TESTS) == []


def test_the_check_finds_a_missing_row_and_a_missing_file():
    rows = table("| `zerosim/parallel/data/_plan.py` | `test_no_such_file.py` |\n")
    found = problems(rows, ["zerosim/parallel/data/_plan.py", "zerosim/parallel/data/_engine.py"], TESTS)
    assert found == ["zerosim/parallel/data/_engine.py: no row in tests/MODULES.md",
                     "zerosim/parallel/data/_plan.py: names test_no_such_file.py, which is not in tests/"]
