"""The student's install carries no solution; the instructor kit is its own artefact.

The wheel a student installs is built here (`pip wheel . --no-deps` into a temporary folder) and its files listed: no
reference solution, no planted wrong one (each is a solution less one line), no rubric, no line of any of them. The
kit (course/instructor, its own package) is built the same way and holds every one; `zerosim assignment
export-instructor DIR` writes it out, and without the kit installed says in one line how to get it.
"""

import ast
import importlib.util
import json
import re
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
    """The lines of a kit file long enough to be its own (code or prose): not comments, docstrings' first lines, a
    function's signature or an import (the starter the student gets has every one)."""
    return {line.strip() for line in path.read_text().splitlines()
            if len(line.strip()) > 30 and not line.strip().startswith(("#", '"""', "def ", "import ", "from "))}


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


def test_the_student_wheel_carries_the_notebooks_with_their_outputs_cleared(student_wheel):
    """`zerosim notebooks --out DIR` works from a wheel: every notebook of notebooks/ is in it (setup.py's build step),
    each cell's source as in the repository, no cell holding an output (a stored output would answer a prediction)."""
    with zipfile.ZipFile(student_wheel) as z:
        shipped = {n.rsplit("/", 1)[1]: json.loads(z.read(n)) for n in z.namelist()
                   if n.startswith("zerosim/teaching/notebooks/") and n.endswith(".ipynb")}
    repo = {p.name: json.loads(p.read_text()) for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert sorted(shipped) == sorted(repo) and len(repo) >= 15
    for name, nb in shipped.items():
        assert [c["source"] for c in nb["cells"]] == [c["source"] for c in repo[name]["cells"]], name
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code), name
    assert any(c.get("outputs") for c in repo["01_worked_example.ipynb"]["cells"])  # the repository's copy has some


@pytest.mark.parametrize("number", [1, 2, 3, 4])
def test_the_starter_kit_holds_the_handout_the_file_and_no_line_of_a_solution(tmp_path, capsys, number):
    from zerosim.teaching.assignments import get

    a = get(number)
    assert main(["assignment", "starter", str(number), "--out", str(tmp_path / "kit")]) == 0
    said = capsys.readouterr().out
    written = sorted(str(p.relative_to(tmp_path / "kit")) for p in (tmp_path / "kit").rglob("*") if p.is_file())
    assert "README.md" in written and a.files in written, written
    assert (tmp_path / "kit" / a.files).read_text() == a.starter
    assert a.handout in (tmp_path / "kit" / "README.md").read_text()
    assert f"zerosim assignment check {number} --file" in said
    named = sorted(set(re.findall(r"notebooks/(\d\d_\w+\.ipynb)", a.handout)))
    assert [w for w in written if w.startswith("notebooks/")] == [f"notebooks/{n}" for n in named]
    text = "\n".join(p.read_text() for p in (tmp_path / "kit").rglob("*") if p.is_file())
    assert not [w for w in written if "solution" in w or "planted" in w or "rubric" in w]
    kit = [p for p in kit_files() if p.parts[len(KIT.parts)] in (f"a{number}", "exercises")]
    assert kit or number == 4  # (assignment 4's reference and planted ones are the kit's too: a4/)
    leaked = {str(p.relative_to(KIT)): {line for line in own_lines(p) if line in text} for p in kit}
    assert {k: v for k, v in leaked.items() if v} == {}


@pytest.mark.bad_input("outputs", unchanged=True)
def test_the_starter_kit_never_overwrites_a_students_file(tmp_path, capsys):
    (tmp_path / "kit").mkdir()
    (tmp_path / "kit" / "a1_ring.py").write_text("# my week of work\n")
    assert main(["assignment", "starter", "1", "--out", str(tmp_path / "kit")]) == 2
    err = capsys.readouterr().err
    assert "a1_ring.py is there already" in err and "--out" in err
    assert sorted(p.name for p in (tmp_path / "kit").iterdir()) == ["a1_ring.py"]  # nothing else written either
    assert (tmp_path / "kit" / "a1_ring.py").read_text() == "# my week of work\n"


def test_zerosim_notebooks_writes_every_notebook_cleared(tmp_path, capsys):
    assert main(["notebooks", "--out", str(tmp_path / "nb")]) == 0
    names = sorted(p.name for p in (tmp_path / "nb").glob("*.ipynb"))
    assert names == sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb"))
    for p in (tmp_path / "nb").glob("*.ipynb"):
        assert all(not c.get("outputs") for c in json.loads(p.read_text())["cells"]), p.name
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"  jupyter lab {tmp_path / 'nb'}"  # the command alone on its line, to be copied
    assert all(len(line) <= 120 for line in out[:-1]), out  # the words wrap, however long the folder's name


def test_the_learning_paths_student_instructions_never_clone():
    """A student installs the package and writes what they need from it; the path never sends them to a clone (an
    editable install, `pip install -e`, is a clone's): the install line names the package and `zerosim notebooks`."""
    pages = sorted((ROOT / "docs" / "tutorials").glob("*.md"))
    text = "\n".join(p.read_text() for p in pages)
    assert pages and not re.search(r"git clone|pip install -e|pip install \./", text)
    readme = " ".join((ROOT / "docs" / "tutorials" / "README.md").read_text().split())
    assert '.venv/bin/pip install "zerosim[notebooks]"' in readme and "zerosim notebooks --out" in readme
    assert "zerosim assignment starter N --out aN" in readme
