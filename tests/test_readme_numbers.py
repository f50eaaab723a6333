"""The numbers the README quotes from training runs, printed by the same commands run in this process.

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

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def printed(capsys, line: str) -> str:
    """What the README's command `line` (".venv/bin/zerosim train ...", comment dropped) prints here."""
    argv = shlex.split(line.split("#", 1)[0])[1:]
    assert main(argv) == 0
    return capsys.readouterr().out


def readme_line(pattern: str) -> str:
    (line,) = [x for x in README.splitlines() if re.search(pattern, x)]
    return line


@pytest.mark.pinned
@pytest.mark.parametrize("model", ["gpt", "llama"])
def test_the_decoders_answer_accuracy_is_the_readmes(capsys, model):
    line = readme_line(rf"^\.venv/bin/zerosim train --model {model} .*# ")
    quoted = [float(x) for x in re.findall(r"\d+\.\d+", line.split("#", 1)[1])[:2]]  # "0.23 -> 1.00"
    said = [float(a) for a in re.findall(r"answer accuracy ([\d.]+) on held-out", printed(capsys, line))]
    assert [round(said[0], 2), round(said[-1], 2)] == quoted, said


@pytest.mark.pinned
def test_the_mlp_losses_the_mpi_section_quotes_are_the_simulators(capsys):
    # "Both print the same losses and per-rank table": the numpy command beside mpiexec's in the README
    command = readme_line(r"mpiexec -n 4 .*zerosim train --backend mpi --steps 30").split("# vs:", 1)[1].strip()
    block = re.search(r"Stage 2, bf16-mixed, Adam, the default MLP:\n\n```\n(.*?)```", README, re.S).group(1)
    out = printed(capsys, command).splitlines()
    for quoted in block.splitlines():
        if quoted.strip() != "...":
            assert quoted in out, f"the README says {quoted!r}; the command printed:\n" + "\n".join(out)
