"""The README runs as written and prints what it says: every shell command, in order, from a fresh shell, in a
fresh copy of the project — and the numbers the README quotes beside a command are the numbers it prints.

What a new user does: copy the project, paste the quick start (which makes `.venv`), then paste each later
command into a *new* shell (no activated environment, nothing on PATH from us). Blocks marked
`<!-- not run here: ... -->` (the GPU suite: no GPU on this machine) are listed, not run. Every command that
runs must have an entry in CHECKS saying what its output must show; a command without one fails the test.

The quick start's test command installs the test extras and would run the whole suite: that suite is the one
running this test, so here it only collects (`--collect-only`), which proves the install and the suite's
imports; `.ci/run` runs it in full. The fast lane the README names beside it is collected the same way.
The README's Python snippet runs too, and each `print` marked `# → VALUE` must print VALUE.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
SAFETY_TIMEOUT = HANG_TIMEOUT  # seconds: only a command that hangs gets here (the quick start's install is the longest)

pytestmark = pytest.mark.slow  # a fresh virtual environment, an install and every command: minutes


def readme_blocks(text: str) -> list:
    """[(language, code, runnable)] for every fenced block, in order."""
    return [(m.group(2), m.group(3), m.group(1) is None)
            for m in re.finditer(r"(<!-- not run here[^>]*-->\s*)?```(\w+)\n(.*?)```", text, re.S)]


def fresh_copy(dest: Path) -> Path:
    """The project's files as a clone of this working tree would hold them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    files = listed.stdout.split() if listed.returncode == 0 and listed.stdout else None
    if files is None:  # not a git checkout: everything but environments and caches
        skip = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "scratch")
        shutil.copytree(ROOT, dest, ignore=skip)
        return dest
    for f in files:
        if (ROOT / f).exists():  # a file deleted in the working tree but not yet in the index
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    return dest


def user_env() -> dict:
    """A new shell's environment: PATH without this interpreter's virtual environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "HYPOTHESIS_PROFILE")}
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != here)
    return env


# -- what each command must print: the README's own numbers, read from the README where it quotes them -----------
def numbers(text: str) -> list:
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?", text)]


def check_replay(out: str, readme: str, project: Path) -> None:
    excerpt = re.search(r"## What the replay shows.*?```\n(.*?)```", readme, re.S).group(1)
    for line in excerpt.splitlines():  # the README's excerpt is the command's output, word for word
        if line.strip():
            assert line in out.splitlines(), f"the README's replay excerpt says {line!r}; the replay does not print it"
    truth = re.search(r"prints what a GPU really holds: `(\[.*?\])`", readme).group(1)
    for value in json.loads(truth):
        assert f"its fp16 copy is really {value!r}" in out


def check_gpt(out: str, readme: str, project: Path, line: str) -> None:
    first, last, chance = numbers(line.split("# accuracy", 1)[1])
    said = re.findall(r"answer accuracy ([\d.]+) on held-out strings \(chance ([\d.]+)\)", out)
    accuracy = [(float(a), float(c)) for a, c in said]
    rounded = (round(accuracy[0][0], 2), round(accuracy[-1][0], 2), round(accuracy[0][1], 2))
    assert rounded == (first, last, chance), said


def check_memory_75b(out: str, readme: str, project: Path) -> None:
    row = re.search(r"\| zerosim: formulas = meta ledgers \|(.*)\|", readme).group(1)
    ledger = [float(re.split(r"\s+", line.split("|")[1].strip())[0])  # the "ledger" column, stage by stage
              for line in out.splitlines() if re.match(r"^[0-3]\s+\d", line)]
    assert ledger == numbers(row), (ledger, row)  # 120, 31.406, 16.641, 1.875 GB per rank


def check_figures(out: str, readme: str, project: Path) -> None:
    assert "wrote figures/memory_by_stage.png" in out.splitlines()  # the README: "writes figures/memory_by_stage.png"
    assert (project / "figures" / "memory_by_stage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def stage_row(out: str, stage: int) -> list:
    (line,) = [x for x in out.splitlines() if re.match(rf"^{stage}\s+\d", x)]
    return numbers(line)


def check_memory_67b(out: str, readme: str, project: Path) -> None:
    quoted = r"holds ([\d.]+) GB of model states .*?, ([\d.]+) GB with\s+block checkpointing"
    states, with_block = re.search(quoted, readme, re.S).groups()
    row = stage_row(out, 3)  # stage, params, grads, master, m, v, ledger, formula, activ., total, peak, sent, formula
    assert round(row[6], 1) == float(states) and round(row[8], 1) == float(with_block), row


def check_memory_8192(out: str, readme: str, project: Path) -> None:
    p_bytes = re.search(r"P per layer at L = 8192 · over 32 layers \|[^|]*\| ([\d,]+) · ([\d,]+)", readme).groups()
    (mb,) = [numbers(x)[0] for x in out.splitlines() if re.match(r"^\s+P\s+\d", x)]  # printed in MB, 3 decimals
    one, all_layers = (int(x.replace(",", "")) for x in p_bytes)
    assert round(one / 1e6, 3) == mb and all_layers == 32 * one, (mb, p_bytes)


def check_timeline_one(out: str, readme: str, project: Path) -> None:
    trace = json.loads((project / "scratch" / "step.json").read_text())
    assert {e["ph"] for e in trace["traceEvents"]} >= {"X", "M"}
    assert (project / "scratch" / "step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "N = 1,024 ranks, ZeRO-3" in out


def check_wire_timeline(out: str, readme: str, project: Path, line: str) -> None:
    """The README's seconds of `gather params` at 1,024 GPUs for the wire this line turns on."""
    qwz, fp8 = r"([\d.]+) s with\s+qwZ", r"([\d.]+) s with\s+torchao's fp8\s+all-gather"
    said = qwz if "--zero-quantized-weights" in line else fp8
    quoted = float(re.search(said, readme).group(1))
    printed = float(re.search(r"^\s+gather params\s+\d+ calls\s+([\d.]+) s", out, re.M).group(1))
    assert round(printed, 2) == quoted, (printed, quoted)
    fp16 = float(re.search(r"spends\s+([\d.]+) s gathering\s+weights in fp16", readme).group(1))
    assert fp16 > quoted  # the unquantized run's 14.98 s is checked by tests/test_zeropp.py


def check_wire_memory(out: str, readme: str, project: Path) -> None:
    quoted = float(re.search(r"kind \"comm\": ([\d.]+) MB a rank for\s+GPT-2 small's embedding", readme).group(1))
    printed = float(re.search(r"dequantized \(kind 'comm'\) peaks at ([\d.]+) GB a rank", out).group(1))
    assert round(quoted / 1e3, 3) == printed, (quoted, printed)


def check_sweep(out: str, readme: str, project: Path) -> None:
    ib3 = [int(x) for x in re.search(r"^ib_ndr\s+3\s+(.*?)\s*$", out, re.M).group(1).replace("%", "").split()]
    words = (r"exposed communication ([\d.]+)–([\d.]+) % of a (\d+) s step at 64 and 128 ranks, then ([\d.]+) % at "
             r"256, (\d+) % at 512, (\d+) % at 1024, (\d+) % at 2048, (\d+) % at 4096")
    quoted = re.search(words.replace(" ", r"\s+"), readme)  # wherever the README's lines break
    lo, hi, _, n256, *rest = map(float, quoted.groups())
    assert ib3 == [round(lo), round(hi), round(n256), *map(round, rest)], ib3  # the command prints whole percents
    n_star = re.search(r"\*\*N\\\* ≈ (\d+)\*\*", readme).group(1)
    assert f"ib_ndr: ZeRO-3's gathers stop hiding past N ≈ {n_star}:" in out
    nvlink = int(re.search(r"over NVLink\s+N\\\* ≈ ([\d,]+)", readme).group(1).replace(",", ""))
    printed = int(re.search(r"nvlink4: ZeRO-3's gathers stop hiding past N ≈ ([\d,]+)", out).group(1)
                  .replace(",", ""))
    assert round(printed, -3) == nvlink, printed


def check_train_save(out: str, readme: str, project: Path, line: str) -> None:
    listed = sorted(f"scratch/ckpt/{p.name}" for p in (project / "scratch" / "ckpt").iterdir())
    assert listed == sorted(x.strip() for x in line.split("#", 1)[1].split(",")), listed


def check_resume(out: str, readme: str, project: Path, line: str) -> None:
    header = out.splitlines()[0]
    stage, ranks = re.search(r"ZeRO stage (\d), (\d) ranks", line.split("#", 1)[1]).groups() if "ZeRO stage" in line \
        else re.search(r"on (\d) ranks at stage (\d)", line.split("#", 1)[1]).groups()[::-1]
    assert f"ZeRO stage {stage}, {ranks} ranks on numpy" in header, header
    assert "resumed from scratch/ckpt at step 6" in header, header
    assert out.splitlines()[1].startswith("step     7"), out  # "continues at step 7"


def check_inspect(out: str, readme: str, project: Path) -> None:
    assert "ZeRO stage 3, 4 ranks, 5,508 parameters, step 6" in out and "owns [0, 1,377)" in out and "bytes" in out


def check_consolidate(out: str, readme: str, project: Path) -> None:
    assert out.startswith("wrote scratch/full.safetensors: 18 tensors")
    assert (project / "scratch" / "full.safetensors").is_file()


def check_mpi_train(out: str, readme: str, project: Path, line: str) -> None:
    block = re.search(r"Stage 2, bf16-mixed, Adam, the default MLP:\n\n```\n(.*?)```", readme, re.S).group(1)
    for quoted in block.splitlines():  # the README's table is what the command prints, line for line
        if quoted.strip() != "...":
            assert quoted in out.splitlines(), f"the README says {quoted!r}; mpiexec printed:\n{out}"
    numpy_cmd = line.split("# vs:", 1)[1].strip()  # "Both print the same losses and per-rank table, line for line"
    simulated = subprocess.run(["bash", "-c", numpy_cmd], cwd=project, env=user_env(), capture_output=True, text=True,
                               timeout=SAFETY_TIMEOUT)
    assert simulated.stdout.splitlines()[1:] == out.splitlines()[1:] and "4 ranks on numpy" in simulated.stdout


def check_llama(out: str, readme: str, project: Path, line: str) -> None:
    first, last = numbers(line.split("#", 1)[1])  # "# 0.23 -> 1.00": the answer accuracy at the first and last step
    said = [float(a) for a in re.findall(r"answer accuracy ([\d.]+) on held-out strings", out)]
    assert (round(said[0], 2), round(said[-1], 2)) == (first, last), said


def check_llama_8192(out: str, readme: str, project: Path) -> None:
    quoted = re.search(r"a decoder layer keeps\s+([\d,]+) bytes, ([\d.]+) GB of it P: no stage fits — ZeRO-3 holds "
                       r"([\d.]+) GB measured \+ ([\d.]+) GB estimated,\s+\*\*([\d.]+) GB short\*\*", readme).groups()
    layer, p_gb, measured, estimated, short = quoted
    (block,) = [numbers(x)[0] for x in out.splitlines() if re.match(r"^\s+one block\s+\d", x)]  # MB, 3 decimals
    (p_mb,) = [numbers(x)[0] for x in out.splitlines() if re.match(r"^\s+P\s+\d", x)]
    assert round(int(layer.replace(",", "")) / 1e6, 3) == block and round(p_mb / 1e3, 2) == float(p_gb)
    # the verdict table only: one line per stage ending in its verdict (the per-rank table above also starts with 0-3)
    verdict_line = r"^([0-3])[ \t]+([\d.]+)[ \t]+([\d.]+)[ \t]+[\d.]+[ \t]+((?:fits|does not fit).*)$"
    verdicts = re.findall(verdict_line, out, re.M)
    assert len(verdicts) == 4 and all(v[3].startswith("does not fit") for v in verdicts), verdicts
    stage3 = verdicts[-1]
    assert (round(float(stage3[1]), 2), round(float(stage3[2]), 2)) == (float(measured), float(estimated)), stage3
    assert stage3[3] == f"does not fit: {short} GB short", stage3


def check_llama_ds_config(out: str, readme: str, project: Path) -> None:
    # the README's estimate row: DeepSpeed's gradient buckets are reduce_bucket_size x 2 B (once at stage 3)
    config = json.loads((project / "zerosim/frameworks/deepspeed/samples/ds_config_zero3.json").read_text())
    size = config["zero_optimization"]["reduce_bucket_size"]
    if size == "auto":  # transformers' HfDeepSpeedConfig fills it with hidden_size² (integrations/deepspeed.py)
        hidden = json.loads((project / "zerosim/models/hf/configs/llama-3-8b.json").read_text())["hidden_size"]
        size = hidden * hidden
    bucket = re.search(r"DeepSpeed gradient buckets\s+([\d.]+) GB\s+from the config: reduce_bucket_size ([\d,]+) x 2 B",
                       out)
    assert int(bucket.group(2).replace(",", "")) == size and float(bucket.group(1)) == round(2 * size / 1e9, 3), out
    assert re.search(r"^3\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+fits, [\d.]+ GB to spare$", out, re.M), out


def check_plan(out: str, readme: str, project: Path) -> None:
    skipped = numbers(re.search(r"ZeRO-0/1/2\s+are skipped \(([\d,./ ]+) GB of model states", readme).group(1))
    printed = [float(x) for x in re.findall(r"^  ZeRO-[012]: ([\d.]+) GB$", out, re.M)]
    assert printed == skipped, (printed, skipped)
    best = re.search(r"\*\*ZeRO-3 with block\s+checkpointing, (\d+) sequences × (\d+) micro-steps: ([\d.]+) s per "
                     r"step, ([\d.]+) GB measured \+ ([\d.]+) GB estimated, ([\d.]+) GB to\s+spare\*\*",
                     readme).groups()
    row = re.search(r"^ 1  3     block\s+(\d+) × (\d+)\s+([\d.]+)s\s+[\d,]+\s+\d+%\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)",
                    out, re.M).groups()
    assert (row[0], row[1], row[3], row[4], row[5]) == (best[0], best[1], best[3], best[4], best[5]), (row, best)
    assert round(float(row[2]), 1) == float(best[2]), (row, best)
    needs = re.search(r"block checkpointing at 8 sequences needs ([\d.]+) GB", readme).group(1)
    assert re.search(rf"ZeRO-3 block\s+B = 8\s+needs\s+{re.escape(needs)} GB", out), out


def many_nodes_table(readme: str) -> dict:
    """README's memory-against-inter-node-bytes table: {strategy: (states GB, secondary GB or None, inter-node GB)}."""
    rows = {}
    for name in ("FULL_SHARD", "HSDP", "MiCS", "hpZ"):
        line = re.search(rf"^\| {name} \(.*$", readme, re.M).group(0)
        states, secondary, sent = line.split(" | ")[1:4]
        rows[name] = (numbers(states)[-1], numbers(secondary)[-1] if "GB" in secondary else None, numbers(sent)[-1])
    return rows


def check_many_nodes_memory(out: str, readme: str, project: Path) -> None:
    # the printed table: strategy, S, R, then states, formula, 2nd, 2Ψ/S, peak, NVLink, IB (GB): the last seven
    printed = {x.split()[0]: numbers(x)[-7:] for x in out.splitlines() if re.match(r"^(full_shard|hsdp|mics|hpz) ", x)}
    for name, key in (("FULL_SHARD", "full_shard"), ("HSDP", "hsdp"), ("MiCS", "mics"), ("hpZ", "hpz")):
        states, secondary, inter = many_nodes_table(readme)[name]
        row = printed[key]
        assert (row[0], row[1], row[-1]) == (states, states, inter), (name, row)  # measured = formula = README
        assert row[2] == (secondary or 0.0), (name, row)


def check_many_nodes_timeline(out: str, readme: str, project: Path) -> None:
    assert "N = 4,096 ranks on nodes of 8, hpz (group of 8)" in out, out
    (inter,) = [numbers(x)[-1] for x in out.splitlines() if x.strip().startswith("inter-node")]
    assert round(inter, 1) == many_nodes_table(readme)["hpZ"][2], out  # README: "2 rings: 87.3"


def check_nbconvert(out: str, readme: str, project: Path) -> None:
    # the notebook ran from a shell: its executed copy holds the fp16 truth the README quotes for the replay
    executed = json.loads((project / "scratch" / "01_worked_example.ipynb").read_text())
    printed = "".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    truth = re.search(r"prints what a GPU really holds: `(\[.*?\])`", readme).group(1)
    assert all(repr(v) in printed for v in json.loads(truth)), printed[:2000]


CHECKS = [  # (a regular expression the command matches, its check; a check taking `line` reads the command's comment)
    (r"pip install -e \. && \.venv/bin/zerosim replay$", check_replay),
    (r"zerosim train --model gpt --stage 3 --ranks 2 --steps 80", check_gpt),
    (r"zerosim train --model llama --heads 4 --kv-heads 2", check_llama),
    (r"zerosim memory --model llama-3-8b --ranks 8 --seq-len 8192", check_llama_8192),
    (r"zerosim memory --model llama-3-8b .*--ds-config", check_llama_ds_config),
    (r"zerosim plan --model llama-3-70b --gpus 64", check_plan),
    (r"zerosim memory --params 7\.5e9 --ranks 64", check_memory_75b),
    (r"zerosim figures", check_figures),
    (r"zerosim memory --model gpt3-6\.7b .*--checkpoint block", check_memory_67b),
    (r"zerosim memory --d-model 4096 .*--seq-len 8192", check_memory_8192),
    (r"zerosim timeline --model gpt3-175b --ranks 1024 --link ib_ndr --trace", check_timeline_one),
    (r"zerosim timeline --model gpt3-175b --ranks 1024 --link ib_ndr --(zero-quantized-weights|fp8-all-gather)",
     check_wire_timeline),
    (r"zerosim memory --model gpt2-small --ranks 8 --zero-quantized-weights", check_wire_memory),
    (r"zerosim timeline --model gpt3-175b --sweep", check_sweep),
    (r"zerosim train --steps 6 --stage 3 --save scratch/ckpt", check_train_save),
    (r"zerosim train --steps 10 .*--resume scratch/ckpt", check_resume),
    (r"zerosim checkpoint inspect", check_inspect),
    (r"zerosim checkpoint consolidate", check_consolidate),
    (r"pip install -e \"\.\[mpi\]\"", lambda out, readme, project: None),  # an install: its exit status says it all
    (r"jupyter nbconvert --to notebook --execute notebooks/01_worked_example\.ipynb", check_nbconvert),
    (r"mpiexec -n 4 .*zerosim train --backend mpi --steps 30", check_mpi_train),
    (r"zerosim memory --model gpt3-175b --ranks 4096 --gpus-per-node 8 --strategy", check_many_nodes_memory),
    (r"zerosim timeline --model gpt3-175b --ranks 4096 --gpus-per-node 8 --strategy hpz", check_many_nodes_timeline),
]


def run_line(line: str, project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=project, env=user_env(), capture_output=True, text=True,
                          timeout=SAFETY_TIMEOUT)


def test_every_readme_command_runs_as_written_and_prints_what_the_readme_says(tmp_path):
    text = (ROOT / "README.md").read_text()
    test_command = re.search(r"<!-- test-command -->\n```bash\n(.*?)\n```", text).group(1)
    fast_lane = re.search(r"<!-- fast-lane -->`([^`]+)`", text).group(1)
    project = fresh_copy(tmp_path / "project")
    ran, not_run, used = [], [], set()
    for lang, code, runnable in readme_blocks(text):
        if lang != "bash":
            continue
        for line in code.strip().splitlines():
            if not runnable:
                not_run.append(line)
                continue
            if line == test_command:  # install the test extras; collect the suite, not run it (it is running now)
                result = run_line(line + " --collect-only -q", project)
                assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
                assert int(re.search(r"(\d+) tests collected", result.stdout).group(1)) > 1000, result.stdout[-500:]
                lane = run_line(fast_lane + " --collect-only -q", project)
                counted = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", lane.stdout)
                picked, total, left_out = map(int, counted.groups())
                assert picked > 1000 and left_out > 0 and picked + left_out == total, lane.stdout[-500:]
                ran.append(line)
                continue
            result = run_line(line, project)
            failed = f"README command failed: {line}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            assert result.returncode == 0, failed
            matching = [check for pattern, check in CHECKS if re.search(pattern, line)]
            assert len(matching) == 1, f"README command {line!r}: {len(matching)} checks of what it prints (want one)"
            check = matching[0]
            used.add(check)
            if "line" in check.__code__.co_varnames[: check.__code__.co_argcount]:
                check(result.stdout, text, project, line)
            else:
                check(result.stdout, text, project)
            ran.append(line)
    assert used == {check for _, check in CHECKS}, ran  # every check met its command (a README command was not lost)
    # left out, and marked: the GPU suite, and opening the notebooks in JupyterLab (a server waiting for a browser;
    # the nbconvert command beside it runs a notebook from the same install, and test_notebooks_extra.py checks
    # that the extra provides `jupyter lab`)
    assert all("gpu" in line or line.endswith("jupyter lab notebooks/") for line in not_run), not_run
    # what the commands wrote is in scratch/ (and the figures they are meant to redraw): nothing else in the project
    assert not [p for p in ("ckpt", "full.safetensors", "step.json", "step.png", "sweep.png") if (project / p).exists()]
    ignored = subprocess.run(["git", "check-ignore", "-q", "scratch/x"], cwd=ROOT)
    assert ignored.returncode == 0, "scratch/ must be ignored by git"


def test_the_readme_sweep_claims_beside_the_command(tmp_path):
    # The paragraph after the sweep command quotes three more runs: seed 004's schedule (no --comm fsdp), 32k tokens,
    # and one 2,048-token sequence per rank.
    text = (ROOT / "README.md").read_text()
    base = [sys.executable, "-m", "zerosim.cli.main", "timeline", "--model", "gpt3-175b", "--sweep",
            "--forward-prefetch", "--efficiency", "peak"]  # the seed's formula assumes the datasheet peak

    def ib3(*flags):
        out = subprocess.run([*base, *flags], capture_output=True, text=True, timeout=SAFETY_TIMEOUT).stdout
        return out, [int(x) for x in re.search(r"^ib_ndr\s+3\s+(.*?)\s*$", out, re.M).group(1).replace("%", "").split()]

    quoted = r"Without `--comm fsdp` nothing is prefetched in backward, and (\d+)–(\d+) % of the step"
    low, high = map(int, re.search(quoted, text).groups())
    _, seed = ib3("--tokens", "20480")
    assert min(seed) == low and max(seed) == high, seed
    n32k = int(re.search(r"N\\\* ≈ ([\d,]+) at 32k tokens", text).group(1).replace(",", ""))
    out, _ = ib3("--tokens", "32768", "--comm", "fsdp", "--sweep-ranks", "64")
    printed = int(re.search(r"ib_ndr: ZeRO-3's gathers stop hiding past N ≈ ([\d,]+)", out).group(1).replace(",", ""))
    assert round(printed, -2) == n32k, printed
    low, high = map(int, re.search(r"bandwidth\s+leaves (\d+)–(\d+) % of the step exposed at any N", text).groups())
    out, one_sequence = ib3("--tokens", "2048", "--comm", "fsdp")
    assert min(one_sequence) == low and max(one_sequence) == high and "ib_ndr: no N hides" in out, one_sequence
    # and the seconds in parentheses, from --json
    sweep = json.loads(subprocess.run([*base, "--tokens", "20480", "--comm", "fsdp", "--json"], capture_output=True,
                                      text=True, timeout=SAFETY_TIMEOUT).stdout)
    exposed = {r["ranks"]: r["exposed_comm_s"] for r in sweep["rows"] if r["link"] == "ib_ndr" and r["stage"] == 3}
    quoted = (r"with `--json`, in seconds: ([\d.]+)–([\d.]+),\s+then ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+) and "
              r"([\d.]+)\)")
    lo, hi, s256, s512, s1024, s2048, s4096 = numbers(re.search(quoted, text).group(0).split(":", 1)[1])
    flat = [exposed[n] for n in (64, 128)]  # below N* ≈ 182
    assert (round(min(flat), 2), round(max(flat), 2)) == (lo, hi)
    assert (round(exposed[256], 2), round(exposed[512], 2), round(exposed[1024], 2)) == (s256, s512, s1024)
    assert (round(exposed[2048], 1), round(exposed[4096], 1)) == (s2048, s4096)


def test_the_readme_python_snippet_prints_what_its_comments_say(tmp_path):
    # The snippet's student (MLP.init_params, seed 0) must not be its teacher (make_regression's rng), or step 1's
    # losses are ~1e-5 and the example teaches nothing; targets of a random teacher give ~1. Every `print` whose
    # comment says `# → VALUE` must print VALUE (the loss-scaling lines printed t = 0 and [] before: the first step
    # overflowed and was skipped).
    (snippet,) = [code for lang, code, _ in readme_blocks((ROOT / "README.md").read_text()) if lang == "python"]
    result = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    printed = result.stdout.splitlines()
    prints = [line for line in snippet.splitlines() if line.lstrip().startswith("print(")]
    assert len(prints) == len(printed), (prints, printed)
    engine_losses, oracle_losses = (json.loads(part) for part in re.findall(r"\[[^\]]*\]", printed[0]))
    assert engine_losses == oracle_losses
    assert all(0.1 < loss < 100 for loss in engine_losses), engine_losses
    quoted = [(line.split("# → ", 1)[1].split(";", 1)[0].strip(), out)  # (what the comment says, what was printed)
              for line, out in zip(prints, printed) if "# → " in line]
    assert len(quoted) >= 4 and all(value == out for value, out in quoted), quoted
