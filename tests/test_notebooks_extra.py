"""The `notebooks` extra lets a newcomer open the notebooks the way the README says: the README's commands name
`jupyter lab` and `jupyter nbconvert`, and each of those programs is a console script of a package the extra
lists (the extra had nbformat, nbclient, ipykernel and ipywidgets only: no front end, no nbconvert)."""

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent



def extra(name: str) -> set:
    """The distribution names an extra of pyproject.toml lists (without their version bounds)."""
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"][name]
    return {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in listed}


def readme_jupyter_commands() -> list:
    """The `jupyter SUBCOMMAND` programs the docs' shell commands run, e.g. ["lab", "nbconvert"]."""
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return sorted({m for b in blocks for m in re.findall(r"\.venv/bin/jupyter (\w+)", b)})


def provider(script: str) -> str:
    """The installed distribution whose console script `script` is (jupyter-lab -> jupyterlab)."""
    (ep,) = [ep for ep in metadata.entry_points(group="console_scripts") if ep.name == script]
    return ep.dist.name.lower()


def test_the_notebooks_extra_has_a_front_end_and_nbconvert():
    assert {"jupyterlab", "nbconvert"} <= extra("notebooks")


def test_every_jupyter_program_the_readme_runs_comes_from_the_notebooks_extra():
    used = readme_jupyter_commands()
    assert "lab" in used and "nbconvert" in used, used  # open them, and run one from a shell
    for sub in used:
        assert provider(f"jupyter-{sub}") in extra("notebooks"), sub
