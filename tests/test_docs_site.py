"""The docs site's shape, checked without building it (the build, `mkdocs build --strict`, runs in .ci/run with the
`docs` extra, which the default test command never installs):

    the CLI reference    generated from the parser `zerosim` builds: every command, sub-command and flag on the page,
                         and building the parser writes nothing, prints nothing and starts nothing
    the API reference    a page for every top-level package, naming every face under it
    the nav              every page under docs/ is in mkdocs.yml's nav, and every nav entry is a page
    links outside docs/  a link to a notebook or a test (it works on GitHub) is shown on the site as the file's path;
                         a link to a file that is not there stays a link, so the strict build fails on it
    the design's layers  docs/explanation/design.md draws the layers pyproject.toml's import contract enforces
    the commands         every shell command of the README and the docs has its check in test_readme_commands.py
                         (which runs them, slowly), or is marked not run for a known reason; every Python block says
                         what each of its prints prints
    CI                   .ci/run builds the site with warnings as errors, after the README's test command, which does
                         not install the docs extra; its build command, run on a two-page site, fails on a broken link
                         (where MkDocs is installed: the docs extra)
"""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_readme_commands import NOT_RUN_REASONS, checks_for, not_run_reasons, pages, python_blocks, readme_blocks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import docs_site  # noqa: E402  (tools/ is not a package: the docs build loads it as MkDocs hooks)


def every_parser(parser: argparse.ArgumentParser, name: str = "zerosim"):
    """(full command name, parser) for the parser and every sub-parser under it."""
    yield name, parser
    for sub_name, _, sub in docs_site._subcommands(parser):
        yield from every_parser(sub, f"{name} {sub_name}")


@pytest.fixture(scope="module")
def parser():
    from zerosim.cli.main import build_parser

    return build_parser()


def test_the_cli_reference_names_every_command_and_every_flag(parser):
    page = docs_site.cli_reference(parser)
    commands = list(every_parser(parser))
    assert len(commands) >= 20  # 13 commands and the sub-commands of checkpoint, exercise and assignment
    for name, sub in commands[1:]:
        assert f"`{name}`" in page, name
        for action in sub._actions:
            for flag in [] if isinstance(action, argparse._HelpAction) else action.option_strings:
                assert f"`{flag}" in page or f", {flag}" in page, (name, flag)
    assert "| `--tokens` |" in page and "| `--ds-config` |" in page  # two flags, spot-checked by hand


def test_the_cli_reference_fails_when_a_flag_is_missing(parser):
    """The check above can fail: a flag the page does not show is found."""
    page = docs_site.cli_reference(parser).replace("`--ds-config`", "`--dsconfig`")
    missing = [flag for _, sub in every_parser(parser) for a in sub._actions for flag in a.option_strings
               if f"`{flag}" not in page and f", {flag}" not in page and not isinstance(a, argparse._HelpAction)]
    assert "--ds-config" in missing


def test_building_the_parser_has_no_side_effects(tmp_path):
    """The docs build calls build_parser(): in a fresh interpreter, in an empty folder, it writes no file, prints
    nothing, and imports neither torch, nor mpi4py, nor cupy (which would start or probe something)."""
    code = ("import sys; from zerosim.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'mpi4py', 'cupy') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n" and result.stderr == "", (result.stdout, result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_every_face_has_its_api_page():
    generated = docs_site.api_pages()
    text = "\n".join(generated.values())
    for face in docs_site.faces():
        if face.split(".")[1:2] != ["cli"]:
            assert f"::: {face}\n" in text, face
    assert "reference/api/index.md" in generated


def nav_pages() -> list:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:"):]
    return re.findall(r"^\s*- (?:[^:\n]+: )?([\w./-]+\.md)\s*$", nav, re.M)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    listed = nav_pages()
    assert len(listed) == len(set(listed)), "a page listed twice"
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    generated = set(docs_site.api_pages())
    assert set(listed) - on_disk - generated == set(), "nav entries that are no page"
    assert on_disk - set(listed) == set(), "pages missing from mkdocs.yml's nav"
    assert generated <= set(listed), "generated API pages missing from the nav"


def test_the_design_page_draws_the_import_contract():
    """docs/explanation/design.md's layer diagram lists pyproject.toml's layers, bottom to top, by their last name."""
    toml = (ROOT / "pyproject.toml").read_text()
    layers = re.search(r"^layers = \[(.*?)\]", toml, re.S | re.M).group(1)
    contract = [sorted(name.strip().split(".")[-1] for name in row.split("|"))
                for row in re.findall(r'"([^"]+)"', layers)][::-1]
    design = (ROOT / "docs" / "explanation" / "design.md").read_text()
    block = re.search(r"## Layers, and imports that run one way.*?```text\n(.*?)```", design, re.S).group(1)
    drawn = [sorted(part.strip() for part in line[:28].split("|")) for line in block.splitlines() if line.strip()]
    assert drawn == contract, (drawn, contract)


def test_every_docs_command_has_a_check():
    """Every shell command a page shows has exactly one check in test_readme_commands.py's CHECKS (which runs them),
    or sits in a block marked not run for one of NOT_RUN_REASONS."""
    test_command = re.search(r"<!-- test-command -->\n```bash\n(.*?)\n```", (ROOT / "README.md").read_text()).group(1)
    for page in pages():
        text = (ROOT / page).read_text()
        for reason in not_run_reasons(text):
            assert reason.startswith(NOT_RUN_REASONS), (page, reason)
        for lang, code, runnable in readme_blocks(text):
            assert lang not in ("sh", "shell", "console"), f"{page}: a shell block must say bash, so it runs"
            for line in code.strip().splitlines() if lang == "bash" and runnable else []:
                assert line == test_command or len(checks_for(line)) == 1, f"{page}: {line!r} has no check"


def test_every_python_block_says_what_it_prints():
    blocks = python_blocks()
    assert len(blocks) >= 5, blocks  # the README's, use-from-python, the DeepSpeed config, the threads, ...
    for page, code in blocks:
        for line in code.splitlines():
            if line.lstrip().startswith("print("):
                assert "#" in line.split("print(", 1)[1], f"{page}: {line.strip()!r} does not say what it prints"


def test_ci_builds_the_site_strictly_after_the_tests_and_apart_from_them():
    ci = (ROOT / ".ci" / "run").read_text()
    tests_at, docs_at = ci.index('bash -c "$test_cmd"'), ci.index("mkdocs build --strict")
    assert tests_at < docs_at and '".[docs]"' in ci and "mktemp -d" in ci
    readme = (ROOT / "README.md").read_text()
    test_command = re.search(r"<!-- test-command -->\n```bash\n(.*?)\n```", readme).group(1)
    assert "docs" not in re.search(r'"\.\[([^\]]*)\]"', test_command).group(1).split(",")
    assert "build/" in (ROOT / ".gitignore").read_text().split() and "site_dir: build/site" in \
        (ROOT / "mkdocs.yml").read_text()


def ci_build_command() -> list:
    """.ci/run's `mkdocs build ...` (the words after `.venv/bin/mkdocs`), as a list of arguments."""
    ci = (ROOT / ".ci" / "run").read_text()
    words = re.search(r"\.venv/bin/mkdocs (build [^'&|]*)", ci).group(1).split()
    return [w for w in words if not w.startswith("--site-dir") and w != '"$site"']


@pytest.mark.parametrize("link, fails", [("other.md", False), ("gone.md", True)])
def test_the_ci_build_fails_on_a_broken_link(tmp_path, link, fails):
    """CI's own build command, on a two-page site: a link to a page that exists builds, one to a page that does not
    fails the build. (`--quiet` would make both build: it hides the warning from the strict mode's count.)"""
    pytest.importorskip("mkdocs", reason="the docs extra (pip install -e '.[docs]') is not installed")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(f"# Home\n\n[the other page]({link})\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: t\nnav:\n  - index.md\n  - other.md\n")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", *ci_build_command(), "--site-dir", str(tmp_path / "site")],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert (result.returncode != 0) == fails, result.stderr[-2000:]
    assert ("'gone.md', but the target is not found" in result.stderr) == fails, result.stderr[-2000:]


def test_links_to_project_files_outside_docs_become_paths_and_missing_ones_stay_links():
    page = "\n".join([
        "[test_optim.py](../tests/test_optim.py) and [the first notebook](../notebooks/01_worked_example.ipynb);",
        "[gone](../tests/test_gone.py), [a page](explanation/design.md), [a figure](../figures/ring_steps.png),",
        "[the web](https://example.org/x.py), [up too far](../../etc/passwd)",
        "```text", "[test_optim.py](../tests/test_optim.py)", "```",
    ])
    out = docs_site.outside_links(page, "seeds.md")
    assert out.splitlines()[0] == "`tests/test_optim.py` and the first notebook (`notebooks/01_worked_example.ipynb`);"
    assert out.splitlines()[1:] == page.splitlines()[1:]  # missing, in docs, served, remote, outside the project, code
    nested = docs_site.outside_links("[x](../../tests/test_optim.py)", "tutorials/01.md")
    assert nested == "x (`tests/test_optim.py`)"


def test_a_hyphenated_word_of_inline_code_is_kept_whole_and_nothing_else_moves():
    """On a phone Chromium broke `zerosim train --resume` after `--`, even `--ranks` into `--` and `ranks`; the site
    keeps each hyphenated word of inline code on one line (the stylesheet's rule for the span the hook adds), breaking
    the code at its spaces alone. Fenced blocks, highlighted code, headings and a word too long for a 320 px phone
    are left as they were, and no page's text moves by a character (what a reader copies)."""
    page = "\n".join([
        "<p>then <code>zerosim train --resume scratch/ckpt</code> and <code>--ranks</code>, not <code>inspect</code>;",
        "<code>a-b c-d</code> and <code>--prefetch-bucket-size</code></p>",  # two words; 22 characters
        '<pre><span></span><code>zerosim train --resume\n</code></pre><pre><code>zerosim --x</code></pre>',
        '<h2 id="x">The <code>deepspeed-bf16-optimizer</code> recipe</h2>',
        "<p><code>validate-cp,plan-cp,plan-pp,memory-pp</code> <code>a<span>-</span>b</code></p>",  # 37 characters
    ])
    out = docs_site.whole_words(page)
    whole = '<span class="zs-whole">{}</span>'.format
    assert out.splitlines()[:2] == [
        f"<p>then <code>zerosim train {whole('--resume')} scratch/ckpt</code> and <code>{whole('--ranks')}</code>, "
        "not <code>inspect</code>;",
        f"<code>{whole('a-b')} {whole('c-d')}</code> and <code>{whole('--prefetch-bucket-size')}</code></p>"]
    assert out.splitlines()[2:] == page.splitlines()[2:]  # blocks, a heading, too long, markup inside
    assert re.sub(r"<[^>]+>", "", out) == re.sub(r"<[^>]+>", "", page)
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    assert re.search(r"\.md-typeset code \.zs-whole \{\s*white-space: nowrap;\s*\}", css), css


def test_a_lazy_faces_api_page_lists_the_names_the_face_answers():
    """A lazy face (zerosim/_lazy.py) holds no import of its names, so griffe, which reads source, found no members
    and the API page showed the docstring alone; tools/docs_griffe.py's LazyFaces reads the face's table. Each face's
    exports, as the docs build sees them, equal the `__all__` the imported face answers with (where griffe is
    installed: the docs extra)."""
    griffe = pytest.importorskip("griffe", reason="the docs extra (pip install -e '.[docs]') is not installed")
    import importlib

    import docs_griffe

    package = griffe.load("zerosim", search_paths=[str(ROOT)], allow_inspection=False, resolve_aliases=True,
                          extensions=griffe.load_extensions(docs_griffe.IndentedBlocks, docs_griffe.LazyFaces))
    for name in docs_site.faces():
        face = importlib.import_module(name)
        if not hasattr(face, "_NAMES") and not hasattr(face, "_FACES"):
            continue  # an eager face: griffe reads its imports
        static = package
        for part in name.split(".")[1:]:
            static = static.members[part]
        missing = set(face.__all__) - {str(e) for e in static.exports}
        assert {str(e) for e in static.exports} <= set(face.__all__) and missing <= COMPUTED.get(name, set()), name


# names a face computes when first asked for, with no object in its source for the docs to show
COMPUTED = {"zerosim.optim": {"OPTIMIZERS"}}  # {name: class} of every optimizer (zerosim/optim/__init__.py)


def test_a_records_api_page_reads_it_as_a_dataclass():
    """zerosim's records are made by zerosim/_dataclass.py's `dataclass`, not the standard library's whose path griffe
    knows; tools/docs_griffe.py's Dataclasses reads one as the other. Each record of the modules below, as the docs
    build reads it, is labelled a dataclass and shows the `__init__` the imported class has (where griffe is
    installed: the docs extra)."""
    griffe = pytest.importorskip("griffe", reason="the docs extra (pip install -e '.[docs]') is not installed")
    import dataclasses
    import importlib
    import inspect

    import docs_griffe

    package = griffe.load("zerosim", search_paths=[str(ROOT)], allow_inspection=False, resolve_aliases=True,
                          extensions=griffe.load_extensions(docs_griffe.IndentedBlocks, docs_griffe.LazyFaces,
                                                            docs_griffe.Dataclasses))
    seen = 0
    for name in ("zerosim.optim._adam", "zerosim.cluster._trace", "zerosim.precision._formats",
                 "zerosim.parallel.data._plan"):
        static = package
        for part in name.split(".")[1:]:
            static = static.members[part]
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not (isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls)):
                continue
            read = static.members[cls.__name__]
            assert "dataclass" in read.labels, cls
            assert [p.name for p in read.members["__init__"].parameters] == ["self", *inspect.signature(cls).parameters]
            seen += 1
    assert seen >= 8
