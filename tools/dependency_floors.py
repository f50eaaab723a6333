"""The oldest releases pyproject.toml allows, as pip constraints: what `.ci/versions` installs and tests.

    python tools/dependency_floors.py python                   # the oldest Python requires-python names: "3.11"
    python tools/dependency_floors.py pins FILE [EXTRA ...]    # each core dependency, and each of the extras named,
                                                               # pinned at its floor, one a line, into FILE

Every core dependency, and every dependency of an extra named, must declare its floor as NAME>=VERSION (a release
that exists: pip installs it as NAME==VERSION; NAME[EXTRAS] and a ceiling ",<VERSION" after it are read too), and
requires-python as >=3.N: a line in another form is refused by name (tests/test_dependency_floors.py holds the file to
it), since a floor no lane installs is a claim nothing checks.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# NAME, or NAME[EXTRAS], then >=VERSION, then at most a ceiling ",<VERSION" (the docs extra's "mkdocs>=1.6,<2"); the
# pin drops the EXTRAS, which pip refuses in a constraints file (the install's own requirement still asks for them)
_FLOOR = re.compile(r"([A-Za-z0-9_.-]+)(?:\[[A-Za-z0-9_,.-]+\])?\s*>=\s*([0-9]+(?:\.[0-9]+)*)(?:\s*,\s*<\s*[0-9.]+)?")


def project(path: Path = PYPROJECT) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]


def oldest_python(path: Path = PYPROJECT) -> str:
    """The oldest Python `requires-python` allows, "3.N"; ValueError where it is not written ">=3.N"."""
    given = project(path)["requires-python"]
    found = re.fullmatch(r">=\s*(3\.[0-9]+)", given.strip())
    if not found:
        raise ValueError(f"{path.name}: requires-python {given!r} is not written >=3.N")
    return found[1]


def floors(path: Path = PYPROJECT, extras: tuple[str, ...] = ()) -> list[str]:
    """["numpy==2.0", ...]: each of `dependencies`, then each dependency of `extras` in order, at its floor;
    ValueError naming a dependency without one, or an extra pyproject.toml does not declare."""
    declared = project(path)
    given = list(declared["dependencies"])
    for extra in extras:
        if extra not in declared.get("optional-dependencies", {}):
            raise ValueError(f"{path.name}: no extra {extra!r} in [project.optional-dependencies]")
        given += declared["optional-dependencies"][extra]
    pins = []
    for line in given:
        found = _FLOOR.fullmatch(line.strip())
        if not found:
            raise ValueError(f"{path.name}: the dependency {line!r} names no floor as NAME>=VERSION")
        pins.append(f"{found[1]}=={found[2]}")
    return pins


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["python"] and len(argv) == 1:
            print(oldest_python())
        elif argv[:1] == ["pins"] and len(argv) >= 2:
            pins = floors(extras=tuple(argv[2:]))
            Path(argv[1]).write_text("\n".join(pins) + "\n")
            print(", ".join(pins))
        else:
            print("usage:\n" + "\n".join(__doc__.strip().splitlines()[2:5]), file=sys.stderr)
            return 2
    except ValueError as e:
        print(f"dependency_floors: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
