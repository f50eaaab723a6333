"""The numbers the README and the docs quote from training runs, printed by the same commands run in this process.

tests/test_readme_commands.py runs every README command in a fresh project and virtual environment: minutes. The
runs whose numbers come out of training arithmetic (a GPT's and a Llama's answer accuracy, the MLP's losses the
MPI section prints) run here again in seconds, marked `pinned`, so that .ci/pinned checks them under every BLAS
kernel and NumPy SIMD build: what the README quotes must be what any machine prints (docs/portable_numbers.md).
"""

import re
import shlex
from pathlib import Path

import pytest

from zerosim.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = {  # where each run's command and numbers are quoted (the README's manual moved to docs/, issue 34)
    "gpt": "README.md",
    "llama": "docs/how-to/train.md",
    "gpt beside TP": "docs/tensor-parallelism.md",
    "mpi": "docs/how-to/run-under-mpi.md",
}


def printed(capsys, line: str) -> str:
    """What the page's command `line` (".venv/bin/zerosim train ...", comment dropped) prints here."""
    argv = shlex.split(line.split("#", 1)[0])[1:]
    assert main(argv) == 0
    return capsys.readouterr().out


def page(run: str) -> str:
    return (ROOT / PAGES[run]).read_text()


def page_line(run: str, pattern: str) -> str:
    (line,) = [x for x in page(run).splitlines() if re.search(pattern, x)]
    return line


@pytest.mark.pinned
@pytest.mark.parametrize("run, command", [("gpt", "--model gpt --stage 3 --ranks 2"), ("llama", "--model llama"),
                                          ("gpt beside TP", "--model gpt --stage 3 --ranks 4 --tp 2")])
def test_the_decoders_answer_accuracy_is_the_readmes(capsys, run, command):
    line = page_line(run, rf"^\.venv/bin/zerosim train {command} .*# ")
    quoted = [float(x) for x in re.findall(r"\d+\.\d+", line.split("#", 1)[1])[:2]]  # "0.23 -> 1.00"
    said = [float(a) for a in re.findall(r"answer accuracy ([\d.]+) on held-out", printed(capsys, line))]
    assert [round(said[0], 2), round(said[-1], 2)] == quoted, said


@pytest.mark.pinned
def test_the_mlp_losses_the_mpi_section_quotes_are_the_simulators(capsys):
    # "Both print the same losses and per-rank table": the numpy command beside mpiexec's on the MPI page
    command = page_line("mpi", r"mpiexec -n 4 .*zerosim train --backend mpi --steps 30").split("# vs:", 1)[1].strip()
    block = re.search(r"Stage 2, bf16-mixed, Adam, the default MLP:\n\n```\n(.*?)```", page("mpi"), re.S).group(1)
    out = printed(capsys, command).splitlines()
    for quoted in block.splitlines():
        if quoted.strip() != "...":
            assert quoted in out, f"the page says {quoted!r}; the command printed:\n" + "\n".join(out)
