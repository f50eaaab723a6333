"""Every hostile case of tests/hostile_cases.py gets a clear answer (issue 35: the bad-input table counts attempts).

Each case runs (a command line in-process, or a Python call) in a folder of its own, its answer is classified clear,
raw, silent or crash (hostile_cases.classify), and the test fails unless it is clear. With ZEROSIM_HOSTILE_OUTCOMES
set to a path, every outcome is written there as JSON when the session ends: tests/test_bad_input_table.py makes
the table by feature of docs/explanation/testing.md from that file (its refresh script), so the table counts the
cases that ran, not the ones that passed.

The last test here checks that table against the outcomes of this run: each case runs once per process (OUTCOMES
keeps its outcome), so in a whole run it reads what the cases above got and runs none again, and run alone it runs
every case itself. Under pytest -n the whole file runs on one worker (XDIST_GROUPS in tests/conftest.py)."""

import io
import json
import os
import shutil
import traceback
from contextlib import redirect_stderr, redirect_stdout

import pytest
from hostile_cases import FEATURES, FILES, cases

from zerosim.cli.main import main

CASES = cases()
OUTCOMES = {}  # (feature, case name) -> {"feature", "case", "outcome", "said"}: what each case got in this process
CLEAR_EXCEPTIONS = (ValueError, TypeError, FloatingPointError, OverflowError, MemoryError)


@pytest.fixture(scope="module", autouse=True)
def _write_outcomes():
    yield
    path = os.environ.get("ZEROSIM_HOSTILE_OUTCOMES")
    if path:
        with open(path, "w") as f:
            json.dump(list(OUTCOMES.values()), f)


@pytest.fixture(scope="module")
def checkpoint_folder(tmp_path_factory):
    """A run's checkpoints (steps 1 and 2 of `train --widths 4,6,3 --ranks 2`), copied into each case that needs one."""
    folder = tmp_path_factory.mktemp("hostile") / "ck"
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["train", "--widths", "4,6,3", "--ranks", "2", "--steps", "2", "--save", str(folder),
                     "--save-every", "1", "--json"]) == 0
    return folder


def make_files(case, folder, checkpoint) -> dict:
    """The files a case names, made in its folder; {key: path}."""
    paths = {}
    for entry in case.files:
        key, spec = (entry, FILES.get(entry)) if isinstance(entry, str) else entry
        if key == "ck":
            shutil.copytree(checkpoint, folder / "ck")
            paths["ck"] = str(folder / "ck")
            continue
        if isinstance(spec, str) and spec.startswith("manifest "):  # a hand edit of the newest manifest: "manifest
            m = folder / "ck" / "step000002" / "manifest.json"  # KEY.PATH JSON-VALUE"
            data = json.loads(m.read_text())
            keys, value = spec.split(" ", 2)[1:]
            *parents, last = keys.split(".")
            node = data
            for k in parents:
                node = node[k]
            node[last] = json.loads(value)
            m.write_text(json.dumps(data))
            continue
        name, text = spec
        path = folder / name.split(":", 1)[-1]
        if name.startswith("dir:"):
            path.mkdir(parents=True, exist_ok=True)
        elif name.startswith("link:"):  # a symbolic link to `text` (as written: relative to the link's folder)
            path.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(text, path)
        elif name.startswith("fifo:"):  # a named pipe: reading it would wait for a writer for ever
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                path.unlink()
            os.mkfifo(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            body = text()
            path.write_bytes(body if isinstance(body, bytes) else body.encode("utf-8", "surrogateescape"))
            if name.startswith("ro:"):  # a read-only file
                path.chmod(0o444)
        paths[key] = str(path)
    return paths


def classify(case, outcome) -> tuple:
    """("clear" | "raw" | "silent" | "crash", what came back in one line)."""
    if case.call is not None:
        error = outcome
        if error is None:
            return "silent", "no exception"
        text = str(error)
        if not isinstance(error, CLEAR_EXCEPTIONS):
            return "raw", f"{type(error).__name__}: {text}"
        ok = "\n" not in text and all(w in text for w in case.words)
        return ("clear" if ok else "raw"), f"{type(error).__name__}: {text}"
    code, out, err = outcome
    if code is None:  # an exception escaped main()
        return "raw", err.strip().splitlines()[-1] if err.strip() else "an exception"
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if "Traceback (most recent call last)" in err:
        return "raw", lines[-1]
    if case.expect == "runs":  # the input is one zerosim runs (or skips a part of, saying so): rc 0 and the words
        said = out + err
        ok = code == 0 and all(w in said for w in case.words)
        last = said.strip().splitlines()[-1] if said.strip() else ""
        return ("clear" if ok else "raw" if code in (0, 2) else "crash"), last
    if case.expect == "graded":
        failed = [line for line in out.splitlines() if line.startswith("FAIL") or line.startswith("      ")]
        said = out + err
        ok = code == 1 and all(w in said for w in case.words)
        return ("clear" if ok else ("silent" if code == 0 else "raw" if code in (1, 2) else "crash")), (
            failed[1].strip() if len(failed) > 1 else said.strip()[-200:])
    if code == 0:
        return "silent", "exit status 0"
    if code != 2:
        return "crash", f"exit status {code}"
    usage = bool(lines) and lines[0].startswith("usage:")
    error_lines = [line for line in lines if ": error: " in line]
    ok = len(error_lines) == 1 and (len(lines) == 1 or usage) and all(w in err for w in case.words)
    return ("clear" if ok else "raw"), (error_lines[-1] if error_lines else (lines[-1] if lines else ""))


def run(case, folder, checkpoint):
    paths = make_files(case, folder, checkpoint)
    if case.call is not None:
        try:
            case.call(folder)
        except BaseException as e:  # noqa: BLE001 (what it raised is the outcome)
            return e
        return None
    argv = [a.format(**paths) if "{" in a else a for a in case.argv]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # argparse's usage errors
            code = e.code
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            code = None
    return code, out.getvalue(), err.getvalue()


def test_the_features_are_the_readmes():
    assert {c.feature for c in CASES} == set(FEATURES)
    assert len({(c.feature, c.name) for c in CASES}) == len(CASES)


def outcome(case, folder, checkpoint) -> dict:
    """The case run in `folder` (the working directory) and its answer classified, kept in OUTCOMES."""
    kind, said = classify(case, run(case, folder, checkpoint))
    OUTCOMES[(case.feature, case.name)] = {"feature": case.feature, "case": case.name, "outcome": kind, "said": said}
    return OUTCOMES[(case.feature, case.name)]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.feature}: {c.name}" for c in CASES])
def test_every_hostile_case_gets_a_clear_answer(case, tmp_path, monkeypatch, checkpoint_folder):
    monkeypatch.chdir(tmp_path)
    got = outcome(case, tmp_path, checkpoint_folder)
    assert got["outcome"] == "clear", f"{got['outcome']}: {got['said']}"


def test_the_pages_feature_table_is_what_the_cases_that_ran_got(tmp_path_factory, monkeypatch, checkpoint_folder):
    from test_bad_input_table import BY_FEATURE, PAGE, feature_table, readme_table

    for case in CASES:  # the cases this process has not run yet (none, after the test above in a whole run)
        if (case.feature, case.name) not in OUTCOMES:
            folder = tmp_path_factory.mktemp("case")
            monkeypatch.chdir(folder)
            outcome(case, folder, checkpoint_folder)
    outcomes = [OUTCOMES[(c.feature, c.name)] for c in CASES]  # every case, once
    assert readme_table(PAGE.read_text(), BY_FEATURE) == feature_table(outcomes), (
        "refresh it: python tests/test_bad_input_table.py")
