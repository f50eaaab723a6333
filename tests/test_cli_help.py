"""Every command's --help shows its docstring's example commands as written in the source: one command a line,
a long one continued on the next line after its backslash (argparse's default formatter reflowed them into one
paragraph, and a backslash-newline in a plain docstring joined two lines into one)."""

import ast
import inspect
import re

import pytest

from zerosim.cli.main import COMMANDS, build_parser, command


def source_examples(module) -> list:
    """The example lines of a command's docstring as the source file spells them (not `__doc__`, which Python
    has already joined at every backslash-newline of a non-raw string)."""
    tree = ast.parse(inspect.getsource(module))
    first = tree.body[0]
    text = inspect.getsource(module).splitlines()[first.lineno - 1 : first.end_lineno]
    lines, keep = [], False
    for line in text:
        if re.match(r"\s+zerosim ", line):
            keep = True  # an example starts
        elif not line.startswith("        "):
            keep = False  # a continuation line is indented deeper than its example
        if keep:
            lines.append(line.rstrip())
    return lines


def help_of(*words) -> str:
    parser = build_parser()
    for action in parser._subparsers._group_actions:
        parser = action.choices[words[0]]
    for word in words[1:]:  # a command's own actions (exercise show / check)
        parser = parser._subparsers._group_actions[0].choices[word]
    return parser.format_help()


@pytest.mark.parametrize("name", ["memory", "timeline", "exercise", "assignment", "replay", "explore"])
def test_help_keeps_every_example_line_as_written(name):
    examples = source_examples(command(name))
    if name in ("memory", "timeline", "exercise", "assignment"):
        assert len(examples) >= 4, examples  # the commands the issue names have several examples each
    shown = help_of(name).splitlines()
    for line in examples:
        assert line in shown, f"`zerosim {name} --help` lost the example line {line!r}"


def test_a_continued_example_keeps_its_backslash_and_its_next_line():
    shown = help_of("memory").splitlines()
    i = shown.index("    zerosim memory --model llama-7b --ranks 16 --gpus-per-node 8 --seq-len 2048 --batch 1 \\")
    assert shown[i + 1] == "        --zero-quantized-gradients    # DeepSpeed ZeRO++ qgZ at stage 3"


@pytest.mark.parametrize("action", ["show", "check"])
def test_the_exercise_actions_show_their_own_examples_one_a_line(action):
    examples = [line for line in source_examples(command("exercise")) if f" {action} " in line]
    shown = help_of("exercise", action).splitlines()
    assert examples and all(line in shown for line in examples)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_command_lines_help_is_each_commands_own(name):
    # main.py lists each command's one-line help so that `zerosim --help` imports none of them: it must say what
    # the command's module says
    assert COMMANDS[name][1] == command(name).HELP
    assert build_parser(only=name).format_help() == build_parser().format_help()  # the same listing either way
