"""zerosim's instructor kit: what only the instructor needs, in a package of its own (the student's `zerosim` carries
none of it; tests/test_instructor_kit.py lists the student wheel's files to show it).

    pip install ./course/instructor
    zerosim assignment export-instructor DIR     # DIR/a1 ... a3 (solution, planted, rubric), misbehaving, gradescope

    aN/solution.py         assignment N's reference solution: scores 100 %
    aN/planted/NAME.py     the reference with one mistake: NAME is the misconception the grader names
    aN/rubric.md           the written part's rubric
    misbehaving/*.py       hostile submissions (loop, exit, fail to import, kill the interpreter): each scores 0
    exercises/EX/BUG.py    the planted bugs of the exercises assignment 2 grades (withheld from the package)
    gradescope/            setup.sh and run_autograder for a Gradescope programming assignment
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent
ASSIGNMENTS = (1, 2, 3)


def solution(number: int) -> Path:
    """Assignment `number`'s reference solution."""
    return ROOT / f"a{number}" / "solution.py"


def planted(number: int) -> dict:
    """{misconception: path} of assignment `number`'s planted wrong solutions."""
    return {p.stem: p for p in sorted((ROOT / f"a{number}" / "planted").glob("*.py"))}


def misbehaving() -> dict:
    """{what it does: path} of the hostile submissions."""
    return {p.stem: p for p in sorted((ROOT / "misbehaving").glob("*.py"))}


def exercise_planted(exercise: str, bug: str) -> str:
    """The source of planted bug `bug` of a withheld exercise (shard_offset, stage2_free, average_dtype,
    refresh_params)."""
    slug = "".join(c if c.isalnum() else "_" for c in bug.lower()).strip("_")
    while "__" in slug:
        slug = slug.replace("__", "_")
    path = ROOT / "exercises" / exercise / f"{slug}.py"
    if not path.is_file():
        raise ValueError(f"the instructor kit has no planted bug {bug!r} of {exercise}")
    return path.read_text()


def export(folder: str) -> list:
    """Copy the kit into `folder` (made if missing; refused if it holds anything): a1..a3, misbehaving, exercises,
    gradescope and a README. Returns the files written."""
    out = Path(folder)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{folder} exists and is not an empty folder: give a new one")
    written = []
    for part in [f"a{n}" for n in ASSIGNMENTS] + ["misbehaving", "exercises", "gradescope"]:
        for src in sorted((ROOT / part).rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts:
                dst = out / src.relative_to(ROOT)
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
                written.append(str(dst))
    for script in ("setup.sh", "run_autograder"):
        os.chmod(out / "gradescope" / script, 0o755)
    readme = out / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    written.append(str(readme))
    return written
