"""The docs site's generated pages, as MkDocs hooks (mkdocs.yml: `hooks:`); nothing here runs outside a docs build
except in tests/test_docs_site.py, which checks what it generates.

    cli_reference()   the command line, read from the parser `zerosim` itself builds (zerosim.cli.main.build_parser):
                      every command and sub-command, its usage, description and every option. Building the parser
                      runs no command, writes nothing and prints nothing (the test checks it), so the page is the
                      parser's own account, never a hand-kept copy.
    api_pages()       one page per top-level package of zerosim: its face (`__init__`) and every sub-face, rendered
                      by mkdocstrings from the docstrings (static analysis: nothing is imported)
    figures           figures/*.png (what `zerosim figures` draws at the project's root) served at /figures/, so a
                      page shows the committed figure without a copy in docs/
    explorer_page()   the explorer web page (`zerosim explore --html`), served at /explore/index.html
    outside_links()   a link from a page to a project file outside docs/ (a notebook, a test: it works on GitHub) has
                      no page on the site: there it is shown as the file's path; a link to a file that does not
                      exist is left alone, so the strict build still fails on it

Hooks: `on_files` adds the API pages and the figures, `on_page_markdown` puts the CLI reference where
docs/reference/cli.md says `<!-- cli-reference -->` and turns links outside docs/ into paths.
"""

from __future__ import annotations

import argparse
import ast
import posixpath
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "zerosim"
CLI_MARKER = "<!-- cli-reference -->"
API_DIR = "reference/api"
NOT_IN_API = {"cli"}  # the command line has its own reference page, generated from its parser


# -- the command line, from argparse ---------------------------------------------------------------------------------
def _subcommands(parser: argparse.ArgumentParser) -> list:
    """[(name, help, sub-parser)] in the order the parser lists them (argparse keeps no public accessor)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            out += [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return out


def _option_rows(parser: argparse.ArgumentParser) -> list:
    """[(flags, what it takes, default, help)] for every argument but --help and the sub-command slot."""
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        flags = ", ".join(action.option_strings) or action.dest
        if action.choices is not None:
            takes = ", ".join(str(c) for c in action.choices)
        elif action.nargs == 0:
            takes = ""
        else:
            takes = action.metavar if isinstance(action.metavar, str) else action.dest.upper()
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else f"`{default}`"
        text = (action.help or "").replace("%(default)s", str(default)).replace("%%", "%")
        rows.append((flags, takes, shown, " ".join(text.split())))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _command_markdown(parser: argparse.ArgumentParser, name: str, help_line: str, depth: int) -> list:
    lines = [f"{'#' * depth} `{name}`", ""]
    if help_line:
        lines += [help_line[0].upper() + help_line[1:] + ".", ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    if parser.description and depth > 2:  # the top parser's description is the page's first line
        lines += ["```text", textwrap.dedent(parser.description).strip(), "```", ""]
    rows = _option_rows(parser)
    if rows:
        lines += ["| argument | takes | default | what it does |", "|---|---|---|---|"]
        lines += [f"| `{flags}` | {_cell(takes)} | {_cell(default)} | {_cell(text)} |"
                  for flags, takes, default, text in rows]
        lines.append("")
    for sub_name, sub_help, sub in _subcommands(parser):
        lines += _command_markdown(sub, f"{name} {sub_name}", sub_help or "", depth + 1)
    return lines


def cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The whole command line as Markdown: a table of commands, then one section per command (and sub-command)."""
    if parser is None:
        from zerosim.cli.main import build_parser

        parser = build_parser()
    commands = _subcommands(parser)
    lines = ["| command | what it does |", "|---|---|"]
    lines += [f"| [`zerosim {name}`](#zerosim-{name}) | {_cell(text or '')} |" for name, text, _ in commands]
    lines.append("")
    for name, text, sub in commands:
        lines += _command_markdown(sub, f"zerosim {name}", text or "", 2)
    return "\n".join(lines)


# -- the API, from the faces' docstrings -----------------------------------------------------------------------------
def faces(package: Path = PACKAGE) -> list:
    """Every package under zerosim whose `__init__.py` is a face, as dotted names, parents first."""
    out = []
    for init in sorted(package.rglob("__init__.py")):
        parts = init.parent.relative_to(package.parent).parts
        if not any(p.startswith(("_", ".")) for p in parts):
            out.append(".".join(parts))
    return out


def _summary(name: str, package: Path = PACKAGE) -> str:
    """The first paragraph of a face's docstring, on one line."""
    init = package.parent.joinpath(*name.split("."), "__init__.py")
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())  # the first paragraph, whatever its line breaks


def api_pages(package: Path = PACKAGE) -> dict:
    """{path under docs/: Markdown} — an index, then one page per top-level package: its face and every sub-face."""
    names = faces(package)
    tops = sorted({n.split(".")[1] for n in names if n.count(".") >= 1} - NOT_IN_API)
    index = ["# The Python API", "",
             "Generated from the docstrings of the packages' faces (each folder's `__init__.py`): what a program "
             "imports. The files behind a face are private; where each lives and what it holds is "
             "[the architecture map](../../explanation/architecture.md). Most programs need only the top-level "
             "names below.", "",
             "| package | what it holds |", "|---|---|"]
    index += [f"| [`zerosim.{top}`]({top}.md) | {_summary(f'zerosim.{top}', package)} |" for top in tops]
    index += ["", "::: zerosim", "    options:", "      heading_level: 2", "      show_root_heading: true", ""]
    pages = {f"{API_DIR}/index.md": "\n".join(index)}
    for top in tops:
        members = [n for n in names if n == f"zerosim.{top}" or n.startswith(f"zerosim.{top}.")]
        body = []  # the face's own heading is the page's title; its sub-faces follow one level down
        for name in members:
            body += [f"::: {name}", "    options:", f"      heading_level: {1 if name == f'zerosim.{top}' else 2}", ""]
        body += ["Generated from the docstrings of the package's faces; where each private file lives: "
                 "[the architecture map](../../explanation/architecture.md).", ""]
        pages[f"{API_DIR}/{top}.md"] = "\n".join(body)
    return pages


# -- links to the project's files outside docs/ -----------------------------------------------------------------------
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s#]+)\)")
SERVED = ("figures/",)  # outside docs/ but on the site (on_files)


def outside_links(markdown: str, page: str, root: Path = ROOT) -> str:
    """The page's Markdown (`page`: its path under docs/) with each link to an existing project file outside docs/
    replaced by that file's path as code: "[test_optim.py](../tests/test_optim.py)" -> "`tests/test_optim.py`", and
    "[the notebook](../notebooks/01.ipynb)" -> "the notebook (`notebooks/01.ipynb`)". Fenced code is left alone."""

    def replace(m: re.Match) -> str:
        text, target = m.groups()
        if "://" in target or target.startswith(("/", "mailto:")):
            return m.group(0)
        path = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page), target))
        if path.startswith(("docs/", "../")) or path.startswith(SERVED) or not (root / path).is_file():
            return m.group(0)
        bare = text.strip("`")
        return f"`{path}`" if bare in (path, posixpath.basename(path)) else f"{text} (`{path}`)"

    parts = re.split(r"(^```.*?^```)", markdown, flags=re.S | re.M)  # odd parts: fenced blocks
    return "".join(part if i % 2 else LINK.sub(replace, part) for i, part in enumerate(parts))


# -- MkDocs hooks ----------------------------------------------------------------------------------------------------
def on_files(files, config):
    from mkdocs.structure.files import File

    for path, text in api_pages().items():
        files.append(File.generated(config, path, content=text))
    for png in sorted((ROOT / "figures").glob("*.png")):
        files.append(File(f"figures/{png.name}", str(ROOT), config["site_dir"], config["use_directory_urls"]))
    files.append(File.generated(config, EXPLORER, content=explorer_page()))
    return files


EXPLORER = "explore/index.html"  # the explorer web page, hosted on the site (docs/classroom.md links it)


def explorer_page() -> str:
    """The explorer's page as `zerosim explore --html` writes it (the shipped grid, nothing computed here)."""
    import tempfile

    from zerosim.explore import write_page

    with tempfile.TemporaryDirectory() as tmp:
        return Path(write_page(tmp)).read_text("utf-8")


# An inline code span's text, alone in its <code> (no markup inside: not a highlighted or fenced block's, which follow
# <pre> and its empty <span>), and in it each word that holds a hyphen: Chromium and Safari may break a line after a
# hyphen, so a phone showed `zerosim train --` and `resume` on two lines, even `--` and `ranks`
INLINE_CODE = re.compile(r"(?<!<pre>)(?<!<span></span>)<code>([^<]+)</code>")
HYPHENATED = re.compile(r"[^\s]*-[^\s]*")
HEADING = re.compile(r"(<h[1-6][ >].*?</h[1-6]>)", re.S)
WHOLE_WORD = 28  # characters: a longer word may still break where it must, rather than run past a phone's edge (320 px)


def whole_words(html: str) -> str:
    """The page's HTML with each hyphenated word of inline code in a `<span class="zs-whole">` (docs/stylesheets/
    extra.css keeps it on one line): a command in the prose breaks at its spaces, never inside `--resume`. The text
    is the same, character for character (what a reader copies); fenced blocks, highlighted spans and headings (whose
    large type would run a kept word past a phone's edge) are left alone."""

    def words(m: re.Match) -> str:
        text = HYPHENATED.sub(lambda w: f'<span class="zs-whole">{w.group(0)}</span>'
                              if len(w.group(0)) <= WHOLE_WORD else w.group(0), m.group(1))
        return f"<code>{text}</code>"

    parts = HEADING.split(html)  # odd parts: headings
    return "".join(part if i % 2 else INLINE_CODE.sub(words, part) for i, part in enumerate(parts))


def on_page_content(html, page, config, files):
    return whole_words(html)


def on_page_markdown(markdown, page, config, files):
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    return outside_links(markdown, page.file.src_uri)
