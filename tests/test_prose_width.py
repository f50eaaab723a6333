"""What the commands print reads in a terminal of 120 columns: every line of words wraps at the page's width
(zerosim/prose.py, 116), where titles, settings, verdicts and the plain words under a table used to run to 260
columns. Tables keep their columns (a table row has runs of spaces between its cells), commands stay whole to be
copied, and one-line records stay one line to be grepped: a ring's hop in the replay, a weight's exact values, an
event in a diff."""

import re
import shlex

import pytest

from zerosim.cli.main import main

LLAMA = "--model llama-3-8b --ranks 16 --seq-len 4096 --batch 1"
COMMANDS = [
    "replay",
    "replay --stage 3",
    "replay --exact",
    "replay --precision fp16-pure --lr 1e-5 --steps 3",  # the lost update, beside half an ulp
    "replay --loss-scale torch --steps 3",  # the overflow, and the scale that fits
    "replay --mesh 2x2",
    "replay --tp 2",
    "replay --cp 2",
    "replay --cp 2 --cp-style torch",
    "replay --pp 2",
    f"memory {LLAMA} --gpu h100-80gb",  # the estimates, the activations by name, the config's keys
    f"memory {LLAMA} --tp 2 --gpu h100-80gb",
    f"memory {LLAMA} --cp 2 --checkpoint flash --gpu h100-80gb",
    f"memory {LLAMA} --pp 2 --gpu h100-80gb --comm fsdp",  # a pipeline beside FSDP: no_reshard_no_sync
    f"timeline {LLAMA} --stage 3 --gpu h100-80gb --gpus-per-node 8",  # does not fit: the verdict on its own line
    f"timeline {LLAMA} --stage 3 --tp 2",
    f"timeline {LLAMA} --stage 3 --cp 2 --checkpoint flash",
    f"timeline {LLAMA} --stage 1 --pp 2 --accumulation-steps 4",
    "plan --model llama-3-8b --gpus 16 --gpu h100-80gb --seq-len 4096 --global-batch 256 --strategies flash "
    "--stages 1,3 --micro-batches 2,4 --pp 1,2 --cp 1,2",  # left-out reasons, a PP column, every legend
    "diff --a '--ranks 2 --accumulation-steps 2' --b '--ranks 4' --steps 3",
    "timeline --sweep --sweep-ranks 64,128",  # the sweep's legend and where hiding stops
    "memory --strategy all --gpus-per-node 8 --ranks 32",  # a strategy skipped, with its reason
    "timeline --strategy all --sweep --gpus-per-node 8 --sweep-ranks 64,128",
    "lint --stage 3 --precision fp16-pure --measure 2",  # each finding, its sources and what it measured
]
# a hop of the replay's ring; a pipeline's send; a weight's values with their exact twins (--exact: one weight a
# line); a diff's event
RECORDS = (" -> GPU ", "-> sends ", "(exactly ", "event in run ")


def prose(line: str) -> bool:
    """A line of words: not a table row (two runs of spaces or more between its cells: a sentence with one double
    space is still words), not a command to copy, not a record."""
    words = line.strip()
    command = words.startswith("zerosim ") and ":" not in words.split()[1]
    table = len(re.findall(r"\S {2,}(?=\S)", words)) >= 2
    return not table and not command and not any(r in line for r in RECORDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_words_a_command_prints_fit_120_columns(command, capsys):
    assert main(shlex.split(command)) == 0
    lines = capsys.readouterr().out.splitlines()
    long = [x for x in lines if prose(x) and len(x) > 120]
    assert not long, long
    assert sum(map(prose, lines)) > 3  # the filter leaves the words to check


def test_a_table_row_a_command_and_a_record_are_not_words():
    assert not prose(" 1  3     flash            2 × 8        6.34s     10,340   54%")
    assert not prose("  zerosim memory --model llama-3-8b --ranks 16")
    assert prose("zerosim memory: Ψ = 8,030,261,248 parameters (llama-3-8b), N = 16 ranks")
    assert not prose("  reduce-scatter [grads] step 0: GPU 0 -> GPU 1, chunk 1, 2 x fp16 = 4 B")
    assert prose("a sentence with one double space  in it is still a line of words")
    assert not prose("rank  peak memory (B)  bytes sent")  # a table's header
