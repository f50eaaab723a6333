"""The wheel carries the notebooks, so that a student never clones the repository: `pip install zerosim`, then
`zerosim notebooks --out DIR` (zerosim/teaching/_starter.py). Everything else about the build is pyproject.toml's.

setuptools packages files inside a package only, and the notebooks live at the repository's top (notebooks/, where the
tests run them and the docs link them); so `build_py` copies each one into the built package as
zerosim/teaching/notebooks/NAME.ipynb, its outputs cleared: the student's copy answers no prediction before the student
runs it. (An editable install reads the repository's notebooks/ directly.)
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _starter():
    """zerosim/teaching/_starter.py on its own (its top imports the standard library only; the build's environment
    has not installed zerosim's dependencies): `cleared` is the one place a notebook's outputs are cleared."""
    spec = importlib.util.spec_from_file_location("zerosim_starter", HERE / "zerosim" / "teaching" / "_starter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithNotebooks(build_py):
    def run(self):
        super().run()
        out = Path(self.build_lib) / "zerosim" / "teaching" / "notebooks"
        cleared = _starter().cleared
        for source in sorted((HERE / "notebooks").glob("*.ipynb")):  # none in an sdist built without them: skipped
            out.mkdir(parents=True, exist_ok=True)
            (out / source.name).write_text(cleared(source.read_text("utf-8")), encoding="utf-8")


setup(cmdclass={"build_py": BuildWithNotebooks})
