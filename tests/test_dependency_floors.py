"""pyproject.toml's floors are claims `.ci/versions` checks: it installs every core dependency, and every one of the
extras the README's test command installs, at the floor declared and runs those tests on the oldest Python allowed.
It can only do so where each is written as it reads them (tools/dependency_floors.py); a dependency without a floor,
or a requires-python of another form, is a claim nothing would check."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import dependency_floors  # noqa: E402  (tools/, read by .ci/versions)


def test_every_core_dependency_declares_the_floor_the_floors_lane_installs():
    pins = dependency_floors.floors()
    names = [pin.split("==")[0] for pin in pins]
    assert names == ["numpy", "ml_dtypes", "matplotlib", "tqdm", "xxhash"]  # every line of the list, in order
    assert "numpy==2.0" in pins  # NEP 50's promotion: under NumPy 1.26 the fast lane failed (pyproject.toml)
    assert "matplotlib==3.11" in pins  # the explorer reads its text layout (pyproject.toml)


def test_the_extras_the_floors_lane_installs_are_pinned_after_the_core():
    pins = dependency_floors.floors(extras=("test", "notebooks", "mpi"))
    assert pins[:5] == dependency_floors.floors()
    assert [pin.split("==")[0] for pin in pins[5:]] == [
        "pytest", "pytest-xdist", "hypothesis", "import-linter", "ruff", "safetensors", "mpmath",  # test, in order
        "nbformat", "nbclient", "ipykernel", "ipywidgets", "jupyterlab", "nbconvert",  # notebooks, in order
        "mpi4py", "mpich"]  # mpi
    assert "nbconvert==7.1" in pins  # 7.0 imports lxml.html.clean, gone from lxml 5.2 (pyproject.toml)
    assert "pytest-xdist==3.0.2" in pins  # pinned as written: 3.0.0 is not on the index, and "==3.0" would ask for it
    assert "mpi4py==4.1" in pins  # 3.1.6 no longer builds (pyproject.toml)
    assert "mpich==4.1.3" in pins  # before 4.1, mpiexec's status after Ctrl-C was 0 in some runs (pyproject.toml)


def test_the_docs_extra_is_pinned_at_its_floors_without_its_own_extras():
    """The floors lane builds the docs site at these (.ci/versions): NAME[EXTRAS] pins as NAME (pip refuses extras in
    a constraints file) and a ceiling is read past."""
    assert dependency_floors.floors(extras=("docs",))[5:] == [
        "mkdocs==1.6",  # "mkdocs>=1.6,<2": MkDocs 2 drops the plugins (pyproject.toml)
        "mkdocs-material==9.5",  # "mkdocs-material>=9.5,<10"
        "mkdocstrings==0.30"]  # "mkdocstrings[python]>=0.30": 0.26 and 0.29 fail beside today's releases


@pytest.mark.parametrize("written, pin", [
    ("numpy>=2.0", "numpy==2.0"),
    ("numpy >= 2.0", "numpy==2.0"),
    ("numpy>=2.0,<3", "numpy==2.0"),  # a ceiling after the floor
    ("mkdocstrings[python]>=0.30", "mkdocstrings==0.30"),  # the extra dropped from the pin
    ("mkdocstrings[python,foo]>=0.30,<2", "mkdocstrings==0.30"),
])
def test_each_form_of_a_floor_pins_as_name_equals_version(tmp_path, written, pin):
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\nrequires-python = ">=3.11"\ndependencies = ["{written}"]\n')
    assert dependency_floors.floors(path) == [pin]


def test_an_extra_not_declared_is_refused_by_name():
    with pytest.raises(ValueError, match="no extra 'tests'"):
        dependency_floors.floors(extras=("tests",))


def test_the_oldest_python_is_the_one_the_floors_lane_looks_for():
    assert dependency_floors.oldest_python() == "3.11"  # matplotlib 3.11, the explorer's floor, needs it


@pytest.mark.parametrize("written, why", [
    ('dependencies = ["numpy"]', "names no floor"),
    ('dependencies = ["numpy<3"]', "names no floor"),
    ('dependencies = ["numpy<3,>=2.0"]', "names no floor"),  # the ceiling first: not the form the lane reads
    ('dependencies = ["numpy>=2.0,!=2.1"]', "names no floor"),  # an exclusion the pin would not honour
    ('dependencies = ["numpy>=2.0; python_version >= \'3.11\'"]', "names no floor"),
])
def test_a_dependency_without_a_floor_is_refused_by_name(tmp_path, written, why):
    path = tmp_path / "pyproject.toml"
    path.write_text(f'[project]\nrequires-python = ">=3.11"\n{written}\n')
    with pytest.raises(ValueError, match=why):
        dependency_floors.floors(path)


def test_a_requires_python_without_a_floor_is_refused(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nrequires-python = "~=3.11"\ndependencies = []\n')
    with pytest.raises(ValueError, match="requires-python"):
        dependency_floors.oldest_python(path)
