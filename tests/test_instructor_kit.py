"""The student's install carries no solution; the instructor kit is its own artefact.

The wheel a student installs is built here (`pip wheel . --no-deps` into a temporary folder) and its files listed: no
reference solution, no planted wrong one (each is a solution less one line), no rubric, no line of any of them. The
kit (course/instructor, its own package) is built the same way and holds every one; `zerosim assignment
export-instructor DIR` writes it out, and without the kit installed says in one line how to get it.
"""

import ast
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from zerosim.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "course" / "instructor"
pytestmark = pytest.mark.slow  # two wheels built by pip (~20 s)


def checkout(source: Path, into: Path) -> Path:
    """The files a clone of `source` holds (git's tracked files and new ones it does not ignore), copied `into` a
    fresh folder: the wheel is built from what a release holds. Built in place, setuptools reuses an ignored `build/`
    folder and packs whatever a past build left in it (this branch's student wheel once carried a deleted file, a
    copy of assignment 1's solution, that way)."""
    listed = subprocess.run(["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True, timeout=120).stdout.decode().split("\0")
    for name in filter(None, listed):
        if (source / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, into / name)
    return into


def build(source: Path, out: Path) -> Path:
    """`pip wheel SOURCE --no-deps -w OUT`: the wheel's path."""
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def kit_files() -> list:
    """Every file of the kit that is the instructor's own: solutions, planted ones, rubrics, withheld bugs."""
    return sorted(p for pattern in ("a*/solution.py", "a*/planted/*.py", "a*/rubric.md", "exercises/*/*.py")
                  for p in KIT.glob(pattern))


def own_lines(path: Path) -> set:
    """The lines of a kit file long enough to be its own (code or prose): not comments, docstrings' first lines or a
    function's signature (the starter the student gets has every one)."""
    return {line.strip() for line in path.read_text().splitlines()
            if len(line.strip()) > 30 and not line.strip().startswith(("#", '"""', "def "))}


@pytest.fixture(scope="module")
def student_wheel(tmp_path_factory):
    return build(checkout(ROOT, tmp_path_factory.mktemp("clone")), tmp_path_factory.mktemp("student"))


def functions(path: Path) -> list:
    """The source of every function a kit file defines."""
    source = path.read_text()
    return [ast.get_source_segment(source, f) for f in ast.parse(source).body if isinstance(f, ast.FunctionDef)]


def test_the_student_wheel_lists_no_solution_and_no_line_of_one(student_wheel):
    with zipfile.ZipFile(student_wheel) as z:
        names = z.namelist()
        text = {n: z.read(n).decode("utf-8", "replace") for n in names if n.endswith((".py", ".md", ".json", ".txt"))}
    assert any(n.startswith("zerosim/teaching/assignments/") for n in names)  # the graders ship; their answers do not
    assert not [n for n in names if "solution" in n or "planted" in n or "rubric" in n or "instructor" in n]
    # nothing a student reads as teaching material (handouts, starters, graders, exercises) holds a line of the kit's;
    # the library itself implements ZeRO (its own shard arithmetic, its ring), so a generic line may occur there
    teaching = {line.strip() for n, t in text.items() if n.startswith("zerosim/teaching/") for line in t.splitlines()}
    leaked = {str(p.relative_to(KIT)): own_lines(p) & teaching for p in kit_files()}
    assert {k: v for k, v in leaked.items() if v} == {}
    everything = "\n".join(text.values())
    whole = [f"{p.relative_to(KIT)}: {f.splitlines()[0]}" for p in kit_files() if p.suffix == ".py"
             for f in functions(p) if f in everything]
    assert whole == []  # no function of a solution or a planted one, anywhere in the wheel
    assert len(kit_files()) >= 20  # three solutions, their planted ones, three rubrics, the withheld bugs


def test_the_instructor_kit_is_its_own_wheel_with_every_solution(tmp_path):
    wheel = build(checkout(KIT, tmp_path / "clone"), tmp_path / "wheel")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert wheel.name.startswith("zerosim_instructor-")
    for p in kit_files() + sorted((KIT / "misbehaving").glob("*.py")) + [KIT / "gradescope" / "run_autograder"]:
        assert f"zerosim_instructor/{p.relative_to(KIT).as_posix()}" in names, p


def load_kit():
    spec = importlib.util.spec_from_file_location("zerosim_instructor", KIT / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.bad_input("assignments", unchanged=True)
def test_export_instructor_writes_the_kit_or_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "zerosim_instructor", None)  # a student's machine: no kit
    assert main(["assignment", "export-instructor", str(tmp_path / "kit")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install ./course/instructor" in err and not (tmp_path / "kit").exists()
    monkeypatch.setitem(sys.modules, "zerosim_instructor", load_kit())
    assert main(["assignment", "export-instructor", str(tmp_path / "kit")]) == 0
    out = tmp_path / "kit"
    for n in (1, 2, 3):
        assert (out / f"a{n}" / "solution.py").read_text() == (KIT / f"a{n}" / "solution.py").read_text()
        assert (out / f"a{n}" / "rubric.md").exists() and list((out / f"a{n}" / "planted").glob("*.py"))
    assert (out / "gradescope" / "run_autograder").stat().st_mode & 0o100
    assert main(["assignment", "export-instructor", str(tmp_path / "kit")]) == 2  # not over a folder with files
    assert "is not an empty folder" in capsys.readouterr().err
