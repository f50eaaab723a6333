"""The layout of issue 34: every folder's face is its API, and what users read imports only from faces; the old import
paths still answer for one release, with a warning, and hand back the very objects the new paths do.

    faces only        README.md, docs/, notebooks/, course/ and the CLI (zerosim/cli/) never import a private module
                      (a dotted path with a component that starts with "_")
    old paths         every path zerosim/_compat.py's MOVED lists imports, warns once (DeprecationWarning) and gives
                      the new module's objects; a stand-in never hides a face's own name (zerosim.models.schedule is
                      the function, not the old module); a stand-in exists only once its path is used; and the old
                      paths have a removal date, after which a test here fails
    private files     every module behind a face is named with a leading "_" (a folder is a face, a file is private)
"""

import ast
import datetime
import importlib
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import zerosim
from zerosim import _compat

REPO = Path(zerosim.__file__).resolve().parent.parent
PRIVATE = re.compile(r"\bzerosim(?:\.\w+)*\._[a-z]\w*")  # zerosim.x._y: a module behind a face


def python_of(path: Path) -> list:
    """The Python a user reads in `path`: a .py file, a notebook's code cells, a Markdown file's python blocks."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":
        return ["".join(c["source"]) for c in json.loads(text)["cells"] if c["cell_type"] == "code"]
    if path.suffix == ".md":
        return re.findall(r"```python\n(.*?)```", text, re.S)
    return [text]


def private_imports(source: str) -> list:
    """The private modules `source` imports (`from zerosim.x._y import ...`, `import zerosim.x._y`)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
        found += [n for n in names if PRIVATE.fullmatch(n) or PRIVATE.match(n)]
    return found


def user_facing_files() -> list:
    listed = subprocess.run(["git", "ls-files", "README.md", "docs", "notebooks", "course", "zerosim/cli"], cwd=REPO,
                            capture_output=True, text=True).stdout.split()
    return [REPO / f for f in listed if f.endswith((".py", ".ipynb", ".md"))]


def test_the_checker_finds_a_private_import():
    assert private_imports("from zerosim.parallel.data._engine import ZeroEngine\nimport zerosim.cluster._trace\n") == [
        "zerosim.parallel.data._engine", "zerosim.cluster._trace"]
    assert private_imports("from zerosim.parallel.data import ZeroEngine\nfrom zerosim import Cluster\n") == []


def test_what_users_read_imports_only_from_faces():
    files = user_facing_files()
    assert len(files) > 30  # the README, the docs, 11 notebooks, the course, the CLI's modules
    found = {str(f.relative_to(REPO)): p for f in files for src in python_of(f) if (p := private_imports(src))}
    assert found == {}


def test_every_module_behind_a_face_is_private():
    package = REPO / "zerosim"
    public_files = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py")
                          if not p.name.startswith("_") and p.parent != package / "cli")
    # progress.py, outputs.py and prose.py are one-file faces (tqdm's bars as zerosim draws them; where a command may
    # write; the width its words wrap at); nano.py is the reading unit a learner opens and imports by name (STYLE.md
    # item 19); the CLI's modules are the command's own
    assert public_files == ["nano.py", "outputs.py", "progress.py", "prose.py"]


@pytest.mark.parametrize("old", sorted(_compat.MOVED))
def test_an_old_path_still_answers_and_warns(old):
    new = importlib.import_module(_compat.MOVED[old])
    stand_in = importlib.import_module(old)
    stand_in.__dict__.pop("_zerosim_warned", None)
    public = [k for k in getattr(new, "__all__", vars(new)) if not k.startswith("_")]
    if not public:
        return
    with pytest.warns(DeprecationWarning, match=re.escape(old)):
        got = getattr(stand_in, public[0])
    assert got is getattr(new, public[0])


def test_old_import_statements_work():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import zerosim.costs.memory as memory
        from zerosim.timeline import simulate
        from zerosim.zero import ZeroEngine
        from zerosim.zero.plan import STRATEGIES
        old_memory = memory.model_state_memory  # the stand-in warns at its first attribute, whichever test reads it
    from zerosim.analysis.costs import model_state_memory
    from zerosim.analysis.timeline import simulate as new_simulate
    from zerosim.parallel.data import STRATEGIES as new_strategies
    assert ZeroEngine is zerosim.ZeroEngine and simulate is new_simulate and STRATEGIES is new_strategies
    assert old_memory is model_state_memory


def test_a_stand_in_never_hides_a_faces_name():
    import zerosim.models.schedule  # noqa: F401 (the old module's path, a stand-in in sys.modules)

    import zerosim.models

    assert callable(zerosim.models.schedule) and not isinstance(zerosim.models.schedule, type(sys))


def test_shadowed_lists_every_old_path_whose_name_a_face_took():
    """An old module named like one of its face's own functions must be placed, not imported (_compat.py)."""
    found = {}
    for old in _compat.MOVED:
        face, _, name = old.rpartition(".")
        if face in _compat.MOVED:  # under an old package: its parent is a stand-in, nothing of a face to hide
            continue
        module = importlib.import_module(face)  # a lazy face's names are not in its vars until used: ask dir()
        value = getattr(module, name) if name in dir(module) else None
        if value is not None and not isinstance(value, type(sys)):
            found[old] = face
    assert found == _compat.SHADOWED


STAND_INS = """
import json, sys
import zerosim
def stand_ins():
    return sorted(m for m, mod in list(sys.modules.items()) if type(mod).__name__ == "_Moved")
out = [stand_ins()]
import zerosim.costs.memory
out.append(stand_ins())
import zerosim.models.schedule
zero = zerosim.zero.__name__
out.append([stand_ins(), sorted(m for m in sys.modules if m.startswith("zerosim")), callable(zerosim.models.schedule),
            zero])
print(json.dumps(out))
"""


def test_a_stand_in_is_made_only_when_its_path_is_used():
    """`import zerosim` makes none of the 217 stand-ins; an old path makes its own (and its old package's); a face
    places only its SHADOWED ones, as it loads; an old package asked for as an attribute is imported then."""
    run = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", STAND_INS], capture_output=True,
                         text=True, check=True)
    at_import, after_old, (after_face, loaded, schedule_is_the_function, zero) = json.loads(run.stdout)
    assert at_import == []
    assert after_old == ["zerosim.costs", "zerosim.costs.memory"]
    placed = [old for old, face in _compat.SHADOWED.items() if face in loaded]
    assert "zerosim.models.schedule" in placed and len(placed) < len(_compat.SHADOWED)
    assert after_face == sorted(after_old + placed + ["zerosim.zero"])
    assert schedule_is_the_function and zero == "zerosim.zero"


OLD_ATTRIBUTES = """
import json, warnings
import zerosim, zerosim.models
names = [zerosim.zero.__name__, zerosim.models.transformer.__name__]  # neither imported before: asked as attributes
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    same = zerosim.models.transformer.TransformerBlock is zerosim.models.TransformerBlock
print(json.dumps([names, same, [str(w.category.__name__) for w in caught]]))
"""


def test_an_old_path_asked_for_as_an_attribute_of_a_lazy_face_answers():
    """A lazy face (zerosim/_lazy.py: the package's and a subpackage's) imports an old path asked for as its attribute,
    as an eager face's `import` would have left it there: the stand-in, which warns at its first name."""
    run = subprocess.run([sys.executable, "-c", OLD_ATTRIBUTES], capture_output=True, text=True, check=True)
    names, same, warned = json.loads(run.stdout)
    assert names == ["zerosim.zero", "zerosim.models.transformer"] and same and warned == ["DeprecationWarning"]


def test_the_old_paths_go_on_their_date():
    """zerosim/_compat.py's old paths (and zerosim.reference's old names) are kept until REMOVAL or release REMOVED_IN,
    whichever comes first (docs/contributing.md). When this fails, delete zerosim/_compat.py, its install() in
    zerosim/__init__.py, zerosim.reference's __getattr__ and the tests of the old paths above."""
    release = tuple(int(x) for x in zerosim.__version__.split(".")[:2])
    due = tuple(int(x) for x in _compat.REMOVED_IN.split(".")[:2])
    assert datetime.date.today() <= datetime.date.fromisoformat(_compat.REMOVAL) and release < due, (
        f"the old import paths were due to go in release {_compat.REMOVED_IN} or on {_compat.REMOVAL}: remove them")
    contributing = (REPO / "docs" / "contributing.md").read_text(encoding="utf-8")
    assert _compat.REMOVAL in contributing and _compat.REMOVED_IN in contributing
