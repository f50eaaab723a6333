"""The README and the docs run as written and print what they say: every shell command of README.md and of every
page under docs/, each its own test, from a fresh shell, in a fresh copy of the project — and the numbers a page
quotes beside a command are the numbers it prints.

What a new user does: copy the project, paste the quick start (which makes `.venv`), then paste each later
command into a *new* shell (no activated environment, nothing on PATH from us). Each test process (each
pytest-xdist worker) makes its own copy and runs the quick start's install in it once (the `project` fixture); a
command that reads what an earlier command of its page wrote (`--resume scratch/ckpt` after `--save scratch/ckpt`)
runs after it, in the same copy. Blocks marked `<!-- not run here: REASON -->` (a GPU, a browser, torch) are listed,
not run, and REASON must be one of NOT_RUN_REASONS. Every command that runs must have an entry in CHECKS saying what
its output must show; a command without one fails (test_every_docs_command_has_a_check says so in the fast lane). A
command that two pages show runs once; each page's check reads that page's own words.

`.venv` shares the packages of the environment running this test (share_test_environment): pip resolves every
install command against them and builds zerosim from the copy, but downloads and unpacks nothing, which took this
test minutes; `.ci/run` runs the README's two install commands as printed into an empty `.venv`, then the suite in
it. The quick start's test command would run the whole suite: that suite is the one running this test, so here it
only collects (`--collect-only`), which proves the install and the suite's imports; `.ci/run` runs it in full. The
fast lane the README names beside it is collected the same way (the shared packages hold all it needs of the test
command's install, so it does not wait for that). Every Python block of the README and the docs runs too, and says
what it prints: each `print` carries a comment, and one written `# → VALUE` must print VALUE.
"""

import ast
import atexit
import functools
import importlib.metadata
import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
from helpers import HANG_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent
SAFETY_TIMEOUT = HANG_TIMEOUT  # seconds: only a command that hangs gets here (the quick start's install is the longest)

pytestmark = pytest.mark.slow  # a test a command, each a process (`zerosim figures`: ~16 s of CPU)


NOT_RUN_REASONS = ("needs an NVIDIA GPU", "it starts a server and opens a browser", "needs torch")


def readme_blocks(text: str) -> list:
    """[(language, code, runnable)] for every fenced block, in order."""
    return [(m.group(2), m.group(3), m.group(1) is None)
            for m in re.finditer(r"(<!-- not run here[^>]*-->\s*)?```(\w+)\n(.*?)```", text, re.S)]


def not_run_reasons(text: str) -> list:
    return re.findall(r"^<!-- not run here: ([^>]*?) ?-->$", text, re.M)


def pages() -> list:
    """README.md, then every Markdown page of the docs site, as paths relative to the project."""
    return ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


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


@functools.cache
def suite_python() -> str:
    """A folder holding `python3`, a link to the Python running this test (its installation, outside any virtual
    environment): the pages' `python3` is the Python under test. On a machine whose `python3` is another version, a
    suite run with `python3.13 -m pytest` checks the pages on 3.13, and the `.venv` the quick start makes can share
    this environment's packages (share_test_environment)."""
    folder = Path(tempfile.mkdtemp(prefix="zerosim-python3-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    installed = Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (folder / "python3").symlink_to(installed if installed.exists() else sys.executable)
    return str(folder)


def user_env() -> dict:
    """A new shell's environment: PATH without this interpreter's virtual environment, and with its `python3` first
    (suite_python)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "HYPOTHESIS_PROFILE")}
    here = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([suite_python(), *(p for p in env.get("PATH", "").split(os.pathsep) if p != here)])
    return env


# -- what each command must print: the README's own numbers, read from the README where it quotes them -----------
def numbers(text: str) -> list:
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*(?:e-?\d+)?", text)]


def check_replay(out: str, readme: str, project: Path) -> None:
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", readme, re.S | re.M)
    excerpt = next(code for lang, code in blocks if not lang)  # the page's first block of plain output
    for line in excerpt.splitlines():  # the page's excerpt is the command's output, word for word
        if line.strip():
            assert line in out.splitlines(), f"the page's replay excerpt says {line!r}; the replay does not print it"
    truth = re.search(r"prints what a GPU really holds: `(\[.*?\])`", readme).group(1)
    for value in json.loads(truth):
        assert f"its fp16 copy is really {value!r}" in out


# The last accuracy of a 60-step run moves with the BLAS kernel's summation order (a GEMM's adds differ between
# AVX2 and AVX-512 builds, and a held-out answer near a tie flips): 0.91 on one machine, 0.92 on another. The first
# step's (before any update) and chance do not; the last is held to the page's value within two answers in 256.
LAST_ACCURACY_SLACK = 2 / 256


def check_gpt(out: str, readme: str, project: Path, line: str) -> None:
    first, last, chance = numbers(line.split("# accuracy", 1)[1])
    said = re.findall(r"answer accuracy ([\d.]+) on held-out strings \(chance ([\d.]+)\)", out)
    accuracy = [(float(a), float(c)) for a, c in said]
    assert (round(accuracy[0][0], 2), round(accuracy[0][1], 2)) == (first, chance), said
    assert abs(accuracy[-1][0] - last) <= LAST_ACCURACY_SLACK + 0.005, said  # + the page's rounding to 2 digits


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
    assert round(printed, -2) == nvlink, printed  # the page rounds to hundreds


def check_train_save(out: str, readme: str, project: Path, line: str) -> None:
    listed = sorted(f"scratch/ckpt/{p.name}" for p in (project / "scratch" / "ckpt").iterdir())
    assert listed == sorted(x.strip() for x in line.split("#", 1)[1].split(",")), listed
    tags = ", ".join(p.rsplit("/", 1)[1] for p in listed if not p.endswith("latest"))  # what the run said it wrote
    words = " ".join(out.split())
    assert f"saved {len(listed) - 1} checkpoints into scratch/ckpt: {tags} (the latest)" in words, out
    quoted = re.search(r"says where \(`(saved [^`]*)`", " ".join(readme.split()))  # the page's quote of that line
    assert quoted is None or quoted.group(1) in words, (quoted, out)


def check_resume(out: str, readme: str, project: Path, line: str) -> None:
    header = out.splitlines()[0]
    stage, ranks = re.search(r"ZeRO stage (\d), (\d) ranks", line.split("#", 1)[1]).groups() if "ZeRO stage" in line \
        else re.search(r"on (\d) ranks at stage (\d)", line.split("#", 1)[1]).groups()[::-1]
    assert f"ZeRO stage {stage}, {ranks} ranks on numpy" in header, header
    assert "resumed from scratch/ckpt at step 6" in header, header
    assert out.splitlines()[1].startswith("step     7"), out  # "continues at step 7"


def check_inspect(out: str, readme: str, project: Path) -> None:
    for said in re.findall(r"`(ZeRO stage \d, \d ranks, [\d,]+ parameters, step \d+|owns \[0, [\d,]+\))`", readme) or [
            "ZeRO stage 3, 4 ranks, 5,508 parameters, step 6", "owns [0, 1,377)"]:  # what the page quotes, if it does
        assert said in out, (said, out)
    assert "bytes" in out


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


def check_first_and_last_accuracy(out: str, readme: str, project: Path, line: str) -> None:
    first, last = numbers(line.split("#", 1)[1])  # "# 0.23 -> 1.00": the answer accuracy at the first and last step
    said = [float(a) for a in re.findall(r"answer accuracy ([\d.]+) on held-out strings", out)]
    assert round(said[0], 2) == first and abs(said[-1] - last) <= LAST_ACCURACY_SLACK + 0.005, said


def check_llama_8192(out: str, readme: str, project: Path) -> None:
    readme = " ".join(readme.split())  # the page's sentence, wherever its lines break
    quoted = re.search(r"a decoder layer keeps\s+([\d,]+) bytes, ([\d.]+) GB of it P: no stage fits — ZeRO-3 holds "
                       r"([\d.]+) GB measured \+ ([\d.]+) GB estimated,\s+\*\*([\d.]+) GB short\*\*", readme).groups()
    layer, p_gb, measured, estimated, short = quoted
    (block,) = [numbers(x)[0] for x in out.splitlines() if re.match(r"^\s+one block\s+\d", x)]  # MB, 3 decimals
    (p_mb,) = [numbers(x)[0] for x in out.splitlines() if re.match(r"^\s+P\s+\d", x)]
    assert round(int(layer.replace(",", "")) / 1e6, 3) == block and round(p_mb / 1e3, 2) == float(p_gb)
    # the verdict table only: one line per stage ending in its verdict (the per-rank table above also starts with 0-3)
    # stage, allocated peak (measured), reserved, + estimates, = total, verdict
    verdict_line = r"^([0-3])[ \t]+([\d.]+)[ \t]+[\d.]+[ \t]+([\d.]+)[ \t]+[\d.]+[ \t]+((?:fits|does not fit).*)$"
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
    assert re.search(r"^3\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+fits, [\d.]+ GB to spare$", out, re.M), out
    said = re.search(r"`reduce_bucket_size` = hidden_size² = ([\d,]+)", readme)  # the page's own number
    assert said is None or int(said.group(1).replace(",", "")) == size, said


def check_plan(out: str, readme: str, project: Path) -> None:
    skipped = numbers(re.search(r"ZeRO-0/1/2\s+are skipped \(([\d,./ ]+) GB of model states", readme).group(1))
    printed = [float(x) for x in re.findall(r"^  ZeRO-[012]: ([\d.]+) GB$", out, re.M)]
    assert printed == skipped, (printed, skipped)
    best = re.search(r"\*\*ZeRO-3 with torchtitan's op-level\s+selective\s+checkpointing, (\d+) sequences? ×\s+(\d+)\s+"
                     r"micro-steps: ([\d.]+) s per\s+step, (\d+) % MFU,\s+([\d.]+) GB measured \+ ([\d.]+) GB "
                     r"estimated, ([\d.]+) GB to\s+spare\*\*", readme).groups()
    # the top row: #, stage, strategy, B × K, step time, tok/s/GPU, MFU, peak GB, resv., +est., margin
    row = re.search(r"^ 1  3     op-sac\s+(\d+) × (\d+)\s+([\d.]+)s\s+[\d,]+\s+(\d+)%\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+"
                    r"([\d.]+)", out, re.M).groups()
    assert (row[0], row[1], row[3], row[4], row[5], row[6]) == (best[0], best[1], best[3], best[4], best[5], best[6]), \
        (row, best)
    assert round(float(row[2]), 1) == float(best[2]), (row, best)
    needs = re.search(r"block checkpointing with\s+standard attention at\s+8 sequences needs ([\d.]+) GB",
                      readme).group(1)
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
    truth = re.search(r"prints, after seed 004's step, what a GPU really holds: `(\[.*?\])`", " ".join(readme.split()))
    assert all(repr(v) in printed for v in json.loads(truth.group(1))), printed[:2000]


def check_validate(out: str, readme: str, project: Path) -> None:
    median = re.search(r"\| median \\\|predicted / measured − 1\\\| \| [^|]* \| \*\*([\d.]+) %\*\* \|", readme).group(1)
    held_out = re.search(r"^On (\d+) held-out runs", readme, re.M).group(1)  # the page's count, not one typed here
    assert re.search(rf"^held-out\s+{held_out} points: median \|predicted/measured − 1\| {re.escape(median)} %", out,
                     re.M), out


def check_validate_fit(out: str, readme: str, project: Path) -> None:
    for preset in ("eager", "compiled"):
        fitted = re.search(rf"^{preset}: fitted ([\d.]+), shipped ([\d.]+)$", out, re.M)
        assert fitted and abs(float(fitted.group(1)) - float(fitted.group(2))) < 5e-4, out  # the shipped = the refit


def check_plan_efficiency(out: str, readme: str, project: Path, line: str) -> None:
    if "--efficiency 0.42" in line:
        assert "time from: efficiency 0.42 of every datasheet peak" in out, out
    else:  # what the user set is said on the lines that assume it
        assert "framework factor 0.900" in out and "hbm=0.8" in out and "370.8 GB/s" in out and "α 20 µs" in out, out


def check_tensor_replay(out: str, readme: str, project: Path) -> None:
    said = re.search(r"The replay ends at seed 004's averaged gradient `(\[.*?\])`", readme).group(1)
    assert f"The gradient [w1, w2, w3, w4] = {said} is seed 004's averaged gradient" in " ".join(out.split()), out


def check_tensor_memory(out: str, readme: str, project: Path) -> None:
    text = " ".join(readme.split())  # the page's sentence, wherever its lines break
    said = (r"a slice of Ψ_tp = ([\d,]+) parameters, ZeRO-3 shards it to \*\*([\d.]+) GB\*\* of model states, "
            r"a layer keeps \*\*([\d,.]+) MB\*\* by name \(equal to its formula\) and the rank fits with "
            r"\*\*([\d.]+) GB to spare")
    psi, states, layer, spare = re.search(said, text).groups()
    assert f"Ψ_tp = {psi} parameters" in out, out
    assert stage_row(out.split("What one layer saves")[0], 3)[6] == float(states), out  # the ledger column
    one_layer = layer.replace(",", "")
    assert re.search(rf"^\s+one layer\s+{re.escape(one_layer)}\s+\(formula: {re.escape(one_layer)}\)$", out, re.M), out
    assert re.search(rf"^3\s.*fits, {re.escape(spare)} GB to spare$", out, re.M), out


def check_tensor_timeline(out: str, readme: str, project: Path) -> None:
    text = " ".join(readme.split())
    nvlink, ib = re.search(r"sends \*\*([\d,]+) GB of TP traffic a step on NVLink\*\* and \*\*([\d,]+) GB of ZeRO-3 "
                           r"traffic across nodes\*\*", text).groups()
    calls = re.search(r"each of its ([\d,]+) calls a step", text).group(1)
    intra = re.search(r"^\s+intra-node\s+NVLink 4\s+([\d,]+) calls\s+[\d.]+ m?s\s+([\d.]+) GB sent", out, re.M).groups()
    inter = float(re.search(r"^\s+inter-node\s+InfiniBand NDR\s+[\d,]+ calls\s+[\d.]+ m?s\s+([\d.]+) GB sent", out,
                            re.M).group(1))
    assert (intra[0], round(float(intra[1]))) == (calls, int(nvlink.replace(",", ""))), intra
    assert round(inter) == int(ib), inter
    assert re.search(rf"^\s+tensor parallel\s+{re.escape(calls)} calls", out, re.M), out


def check_tensor_plan(out: str, readme: str, project: Path) -> None:
    text = " ".join(readme.split())
    said = (r"the planner's fastest of TP 1, 2, 4 and 8 is \*\*TP (\d+) with (\w+) attention, (\d+) sequences? × (\d+) "
            r"micro-steps: ([\d.]+) s a step, (\d+) % MFU\*\*")
    tp, strategy, b, k, seconds, mfu = re.search(said, text).groups()
    top = re.search(r"^ 1\s+(\d+)\s+3\s+(\w+)\s+(\d+) × (\d+)\s+([\d.]+)s\s+[\d,]+\s+(\d+)%", out, re.M).groups()
    assert top == (tp, strategy, b, k, seconds, mfu), (top, out)


def check_tensor_figure(out: str, readme: str, project: Path) -> None:
    assert "wrote scratch/tensor_mesh.png" in out.splitlines(), out
    assert (project / "scratch" / "tensor_mesh.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_offload_memory(out: str, readme: str, project: Path) -> None:
    text = " ".join(readme.split())
    said = (r"at ZeRO-2 the V100 keeps 2Ψ = ([\d.]+) GB \(([\d.]+) GB at the peak, ([\d.]+) GB with the estimates, "
            r"of ([\d.]+)\), the DGX-2's host 16Ψ = ([\d.]+) GB \(([\d.]+) GB in the step\); without offload no stage "
            r"fits")
    device, peak, total, capacity, host, host_peak = re.search(said, text).groups()
    # stage, placement, device (formula), w/o, host (formula), host peak, nvme (formula), per node
    rows = {int(r[0]): numbers(r[1]) for r in re.findall(r"^([0-3])\s+optimizer-cpu\s+(.*?)\s+x1:", out, re.M)}
    assert rows[2][:2] == [float(device)] * 2 and rows[2][3:6] == [float(host), float(host), float(host_peak)], rows
    assert all(row[2] > float(capacity) for row in rows.values()), rows  # "without offload no stage fits"
    assert f"Capacity {capacity} GB" in out, out
    assert re.search(rf"^2\s+{re.escape(peak)}0\s+[\d.]+\s+[\d.]+\s+{re.escape(total)}0\s+fits", out, re.M), out


def check_offload_timeline(out: str, readme: str, project: Path) -> None:
    assert "with DPU the second of two: the steady state" in " ".join(readme.split())
    assert "(the second of 2 steps: DPU's steady state)" in out and "figure: scratch/offload_step.png" in out, out
    assert (project / "scratch" / "offload_step.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def check_offload_plan(out: str, readme: str, project: Path) -> None:
    text = " ".join(readme.split())
    nth = r"(\d+)(?:st|nd|rd|th)"
    said = rf"no offload first at ([\d.]+) s a step, `optimizer-cpu` {nth} at ([\d.]+) s, `optimizer-nvme` {nth} at " \
           r"([\d.]+) s"
    first, cpu_rank, cpu_s, nvme_rank, nvme_s = re.search(said, text).groups()
    assert re.search(rf"^ 1\s+3\s+\S+\s+\d+ × \d+\s+{re.escape(first)}s\s.*\snone$", out, re.M), out
    for rank, placement, seconds in ((cpu_rank, "optimizer-cpu", cpu_s), (nvme_rank, "optimizer-nvme", nvme_s)):
        assert re.search(rf"^{rank}\s+host .*\s{placement}: .*, {re.escape(seconds)} s a step$", out, re.M), out


def check_offload_train(out: str, readme: str, project: Path) -> None:
    assert "`DeepSpeedCPUAdam`" in readme
    header = out.splitlines()[0]
    assert "offloaded: optimizer-cpu with DPU after 10 steps (adam as DeepSpeedCPUAdam)" in header, header
    assert "host peak (B)" in out, out


def check_said(out: str, page: str, project: Path, line: str) -> None:
    """`zerosim diff` and `zerosim lint` pages: each ';'-separated phrase of the command's comment is in what it prints
    (the parting, the events, the cause and the numbers the page quotes), and the page's own words say the same."""
    said = [part.strip() for part in line.split("#", 1)[1].split(";")]
    words = " ".join(out.split())  # the report's prose wraps at 116 columns; a phrase may cross a line
    for phrase in said:
        assert phrase in words, (phrase, out[-3000:])
    if "they are 4.72e-03 apart" in said:  # the tutorial reads the yardstick of the same run from its table
        assert "run A is\n1.56e-02 and run B 1.62e-02 from the float64 run" in page, page
        assert "run A is 1.56e-02 and run B 1.62e-02 from the float64 run" in words, out
        # the events the tutorial quotes, each one line of the report, as printed
        quoted = [x.strip() for x in page.splitlines() if x.startswith("    event in run ")]
        assert len(quoted) == 2 and all(q in out.splitlines() for q in quoted), (quoted, out)


def check_cp_replay(out: str, page: str, project: Path) -> None:
    text = " ".join(page.split())
    ring, one = re.search(r"gives \*\*([\d.]+)\*\* through the ring in bf16, where one pass of flash attention gives "
                          r"\*\*([\d.]+)\*\*", text).groups()
    assert f"= {ring}\n" in out and f"One pass of flash attention over both keys: {one};" in out, out


def check_cp_torch_replay(out: str, page: str, project: Path) -> None:
    text = " ".join(page.split())
    running, rounded = re.search(r"its fp32 running output \*\*([\d.]+)\*\* is rounded once, to \*\*([\d.]+)\*\*",
                                 text).groups()
    assert f"rounded once: bf16({running}) = {rounded}\n" in out, out


def check_cp_train(out: str, page: str, project: Path) -> None:
    assert "4 ranks = cp 2 x dp 2 (ring, zigzag split)" in out.splitlines()[0], out
    assert "The GPT trains on 4 GPUs = cp 2 × dp 2" in " ".join(page.split())


def check_cp_memory(out: str, page: str, project: Path) -> None:
    text = " ".join(page.split())
    layer, unsplit = re.search(r"layer keeps \*\*([\d.]+) MB\*\* by name against the unsplit layer's "
                               r"\*\*([\d,.]+) MB\*\*", text).groups()
    row = rf"^ +one layer +{re.escape(layer)} +{re.escape(unsplit.replace(',', ''))} +4\.00$"
    assert re.search(row, out, re.M), out


def check_cp_sp_memory(out: str, page: str, project: Path) -> None:
    text = " ".join(page.split())
    layer, shard = re.search(r"the layer keeps \*\*([\d.]+) MB\*\*, the norms' inputs and the two column GEMMs' kept "
                             r"inputs at \*\*([\d,]+)\*\* tokens", text).groups()
    assert re.search(rf"^ +one layer +{re.escape(layer)} +1007\.747 +3\.53$", out, re.M), out
    assert "N = 8 GPUs = tp 2 x cp 2 x dp 2 with sequence" in out and shard == "2,048", out
    shard_row = r"^ +mlp\.FFN input \(sequence shard\) +16\.777 +0\.000 +\(SP\)$"  # 2,048 × 4,096 × 2 bytes
    assert re.search(shard_row, out, re.M), out


def check_cp_timeline(out: str, page: str, project: Path) -> None:
    step = re.search(r"Cut contiguously, the step takes \*\*([\d.]+) ms\*\*", " ".join(page.split())).group(1)
    assert re.search(rf"^step time +{re.escape(step)} ms", out, re.M), out
    assert "rank 0 computing CP position 3" in " ".join(out.split()), out  # (its header wraps at 116 columns)


def check_cp_plan(out: str, page: str, project: Path) -> None:
    assert "Left out beside CP 2, 4: block (context parallelism runs attention as flash blocks" in out, out
    assert re.search(r"^ 1  1  3 ", out, re.M), out  # CP 1 first, as the page says
    assert "the planner still ranks CP 1 first" in " ".join(page.split())


def check_cp_config(out: str, page: str, project: Path) -> None:
    assert '"max_position_embeddings": 262144' in (project / "scratch" / "llama-3.1-8b-256k.json").read_text()


def check_cp_published(out: str, page: str, project: Path) -> None:
    predicted = re.search(r"\| FSDP 2, CP 4 \| 131,072 \| 1,071 \| ([\d,]+) \|", page).group(1)
    assert f"throughput: {predicted} tokens/s per GPU" in out, out


def check_pp_replay(out: str, page: str, project: Path) -> None:
    text = " ".join(page.split())
    a0, a1 = re.search(r"the activation `(\[-?[\d.]+\])` .*?, micro-batch 1 as `(\[-?[\d.]+\])`", text).groups()
    g0, g1 = re.search(r"sends back the gradients `(\[-?[\d.]+\])` and `(\[-?[\d.]+\])`", text).groups()
    size = re.search(r"(\d+) bytes of fp16 each", text).group(1)
    for what, value, gpu in (("activation a", a0, 1), ("activation a", a1, 1), ("gradient da", g0, 0),
                             ("gradient da", g1, 0)):
        assert f"sends its {what} = {value} to GPU {gpu}: {size} B of fp16" in out, (what, value, out)
    masters = re.search(r"the masters are seed 004's `(\[[-\d., |]+\])`", text).group(1)
    assert f"masters [w1, w2 | w3, w4] = {masters}" in out, out


def png_size(path: Path) -> tuple:
    """A PNG's (width, height) from its IHDR chunk (bytes 16-24, big-endian)."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def check_pp_figure(out: str, page: str, project: Path) -> None:
    assert "wrote scratch/pipeline_schedules.png" in out.splitlines(), out
    assert "![GPipe, 1F1B, interleaved 1F1B and zero bubble on 4 ranks](pipeline_schedules.png)" in page
    # the page shows what this command writes: the same figure (its size is the figure's, whatever draws the text)
    assert png_size(project / "scratch" / "pipeline_schedules.png") == png_size(project / "docs" /
                                                                                 "pipeline_schedules.png")


CHECKS = [  # (a regular expression the command matches, its check; a check taking `line` reads the command's comment)
    (r"zerosim validate +#", check_validate),
    (r"zerosim validate --fit", check_validate_fit),
    (r"zerosim plan --model llama-3-8b .*--efficiency", check_plan_efficiency),
    (r"pip install -e \. && \.venv/bin/zerosim replay$", check_replay),
    (r"zerosim train --model gpt --stage 3 --ranks 2 --steps 80", check_gpt),
    (r"zerosim train --model llama --heads 4 --kv-heads 2", check_first_and_last_accuracy),
    (r"zerosim memory --model llama-3-8b --ranks 8 --seq-len 8192", check_llama_8192),
    (r"zerosim memory --model llama-3-8b .*--ds-config", check_llama_ds_config),
    (r"zerosim plan --model llama-3-70b --gpus 64", check_plan),
    (r"zerosim memory --params 7\.5e9 --ranks 64", check_memory_75b),
    (r"zerosim figures *(#|$)", check_figures),  # all of them (one --only is its own command)
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
    (r"zerosim replay --tp 2", check_tensor_replay),
    (r"zerosim train --model gpt --stage 3 --ranks 4 --tp 2", check_first_and_last_accuracy),
    (r"zerosim memory --model llama-3-70b --ranks 256 .*--tp 8", check_tensor_memory),
    (r"zerosim timeline --model llama-3-70b --ranks 256 .*--tp 8", check_tensor_timeline),
    (r"zerosim plan --model llama-3-70b --gpus 256 .*--tp 1,2,4,8", check_tensor_plan),
    (r"zerosim figures --only tensor_mesh", check_tensor_figure),
    (r"zerosim memory --params 13e9 .*--offload-optimizer cpu", check_offload_memory),
    (r"zerosim timeline --params 13e9 .*--offload-optimizer cpu --dpu", check_offload_timeline),
    (r"zerosim plan --model llama-2-13b .*--offload-optimizer cpu,nvme", check_offload_plan),
    (r"zerosim train --stage 2 --offload-optimizer cpu --dpu 10", check_offload_train),
    (r"zerosim (diff|lint) .*#", check_said),
    (r"zerosim replay --cp 2 +(#|$)", check_cp_replay),
    (r"zerosim replay --cp 2 --cp-style torch", check_cp_torch_replay),
    (r"zerosim train --model gpt --attention flash --length 4 --cp 2", check_cp_train),
    (r"zerosim memory --model llama-3-8b --ranks 8 --cp 4", check_cp_memory),
    (r"zerosim memory --model llama-3-8b --ranks 8 --cp 2 --tp 2 --sp", check_cp_sp_memory),
    (r"zerosim timeline --model llama-3-8b --ranks 8 .*--cp 4 --cp-split contiguous", check_cp_timeline),
    (r"zerosim plan --model llama-3-8b .*--cp 1,2,4", check_cp_plan),
    (r"sed 's/\"max_position_embeddings\": 8192/", check_cp_config),
    (r"zerosim timeline --config scratch/llama-3\.1-8b-256k\.json", check_cp_published),
    (r"zerosim replay --pp 2", check_pp_replay),
    (r"zerosim figures --only pipeline_schedules", check_pp_figure),
]


def run_line(line: str, project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=project, env=user_env(), capture_output=True, text=True,
                          timeout=SAFETY_TIMEOUT)


def checks_for(line: str) -> list:
    return [check for pattern, check in CHECKS if re.search(pattern, line)]


def readme_marked(marker: str) -> str:
    """The README command after `<!-- marker -->`: the quick start (main-command) or the test command."""
    return re.search(rf"<!-- {marker} -->\n```bash\n(.*?)\n```", (ROOT / "README.md").read_text()).group(1)


def fast_lane() -> str:
    return re.search(r"<!-- fast-lane -->`([^`]+)`", (ROOT / "README.md").read_text()).group(1)


def shown() -> list:
    """[(line, runnable, [(page, its line number there), ...])] for every shell command of the pages, each once (a
    command that two pages show is one entry, with both pages), in the order the pages first show them."""
    found = {}
    for page in pages():
        text = (ROOT / page).read_text()
        for lang, code, runnable in readme_blocks(text):
            for line in code.strip().splitlines() if lang == "bash" else []:
                where = (page, next(n for n, x in enumerate(text.splitlines(), 1) if x.strip() == line.strip()))
                found.setdefault(line, (runnable, []))[1].append(where)
    return [(line, runnable, where) for line, (runnable, where) in found.items()]


def steps(line: str) -> list:
    """What a command line runs, one step after another: its parts between ` && ` (bash stops at the first that
    fails). The test command's last step, pytest, only collects the suite (that suite is the one running now), and
    with no test run, no assert is rewritten for one (`--assert=plain`: half the collection's time)."""
    parts = line.split(" && ")
    if line in (readme_marked("test-command"), fast_lane()):
        parts[-1] += " --collect-only -q --assert=plain"
    return parts


def needs(line: str, page: str) -> list:
    """The commands `line` reads the work of: those before it on `page` that name a file under scratch/ it names
    too (`--save scratch/ckpt`, then `--resume scratch/ckpt`; the sed that writes a config, then `--config`)."""
    def files(x):
        return set(re.findall(r"scratch/[\w.-]+", x.split("#", 1)[0]))

    before = []
    for lang, code, runnable in readme_blocks((ROOT / page).read_text()):
        for earlier in code.strip().splitlines() if lang == "bash" and runnable else []:
            if earlier == line:
                return before
            if files(earlier) & files(line):
                before.append(earlier)
    return before


VENV_STEP = "python3 -m venv .venv"  # the quick start's first step: every other command runs in what it makes


def share_test_environment(project: Path) -> None:
    """Give the `.venv` just made the packages of the environment running this test: a .pth file after its own
    site-packages names this environment's, each program this environment's bin/ holds and `.venv/bin` does not
    (jupyter, mpiexec, ...: what the extras put there) is there too, run by `.venv`'s own Python, and so is each file
    the extras put beside them (MPICH's lib/libmpi.so, Jupyter's share/). pip then finds every requirement and
    extra satisfied (it downloads and unpacks nothing: the minutes this test took) and still builds zerosim from the
    copy and installs it into `.venv`, as the README says. The install from nothing, each dependency downloaded, is
    `.ci/run`'s: it runs the README's two commands as printed in a fresh `.venv`, then the suite in it. `.venv` is
    of this test's Python (user_env puts it first on PATH as `python3`), so the packages fit it."""
    python = project / ".venv" / "bin" / "python"
    asked = "import sysconfig; print(sysconfig.get_paths())"
    paths = ast.literal_eval(subprocess.run([python, "-c", asked], capture_output=True, text=True, check=True).stdout)
    (Path(paths["purelib"]) / "test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    ours = {e.name for e in importlib.metadata.distribution("zerosim").entry_points if e.group == "console_scripts"}
    for program in sorted(Path(sysconfig.get_path("scripts")).iterdir()):
        mine = Path(paths["scripts"]) / program.name
        own = program.name in ours or program.name.startswith(("python", "activate", "Activate"))
        if mine.exists() or own or not program.is_file():
            continue
        head = program.read_bytes()[:256]
        if head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]:  # a Python launcher: .venv's Python
            mine.write_text(re.sub(r"^#!.*", f"#!{python}", program.read_text(), count=1))
            mine.chmod(0o755)
        else:  # a program of its own (MPICH's mpiexec)
            mine.symlink_to(program)
    done = {Path(sysconfig.get_path(key)).resolve() for key in ("scripts", "purelib", "platlib")}  # shared above
    link_missing(Path(sys.prefix), project / ".venv", done)


def link_missing(source: Path, to: Path, skip: set) -> None:
    """A link in `to` to each file and folder of `source` that `to` lacks, folder by folder (none into `skip`)."""
    for entry in source.iterdir():
        if entry.resolve() in skip or entry.name == "pyvenv.cfg":
            continue
        mine = to / entry.name
        if not mine.exists() and not mine.is_symlink():
            mine.symlink_to(entry)
        elif entry.is_dir() and mine.is_dir() and not mine.is_symlink():
            link_missing(entry, mine, skip)


class Project:
    """A fresh copy of the project and what ran in it: each step once, in the order the tests ask for them."""

    def __init__(self, root: Path):
        self.root, self.ran = root, {}

    def step(self, step: str) -> subprocess.CompletedProcess:
        if step not in self.ran:
            self.ran[step] = run_line(step, self.root)
            if step == VENV_STEP and self.ran[step].returncode == 0:
                share_test_environment(self.root)
        return self.ran[step]

    def line(self, line: str) -> subprocess.CompletedProcess:
        """`line`'s steps in order (each once: two commands that share one, the quick start's `python3 -m venv
        .venv`, share its run), stopping at the first that fails; what they printed, and the last one's status."""
        done = []
        for step in steps(line):
            done.append(self.step(step))
            if done[-1].returncode != 0:
                break
        return subprocess.CompletedProcess(line, done[-1].returncode, "".join(r.stdout for r in done),
                                           "".join(r.stderr for r in done))


@pytest.fixture(scope="session")
def project(tmp_path_factory):
    """The quick start's project, once per test process (each pytest-xdist worker has its own): a fresh copy, and
    the README's quick start up to its first `.venv/bin/zerosim`, the install every later command stands on."""
    made = Project(fresh_copy(tmp_path_factory.mktemp("readme") / "project"))
    for step in readme_marked("main-command").split(" && "):
        if step.startswith(".venv/bin/zerosim"):
            break
        result = made.step(step)
        assert result.returncode == 0, f"the quick start's {step!r} failed:\n{result.stdout[-3000:]}{result.stderr}"
    where = run_line(".venv/bin/python -c 'import zerosim; print(zerosim.__file__)'", made.root).stdout.strip()
    assert Path(where).resolve().is_relative_to(made.root.resolve()), f"`.venv` imports another zerosim: {where}"
    return made


def commands_run() -> list:
    """[(line, where)]: every command a page runs, and the README's fast lane after its test command."""
    run = [(line, where) for line, runnable, where in shown() if runnable]
    at = [line for line, _ in run].index(readme_marked("test-command")) + 1
    readme = (ROOT / "README.md").read_text().splitlines()
    lane = next(n for n, x in enumerate(readme, 1) if "<!-- fast-lane -->" in x)
    return run[:at] + [(fast_lane(), [("README.md", lane)])] + run[at:]


RUN = commands_run()
LEFT_OUT = [line for line, runnable, _ in shown() if not runnable]


# commands over the 20 s a test of the README's command may take, run by .ci/heavy: every figure at once (~16 s of
# CPU, 28 s at load 1-3; each figure's own `--only` command stays in the default run)
HEAVY = (r"zerosim figures *(#|$)",)


def _param(line: str, where: list):
    heavy = [pytest.mark.heavy] if any(re.search(h, line) for h in HEAVY) else []
    return pytest.param(line, where, id=f"{where[0][0]}:{where[0][1]}", marks=heavy)


@pytest.mark.parametrize("line, where", [_param(line, where) for line, where in RUN])
def test_every_readme_command_runs_as_written_and_prints_what_the_readme_says(project, line, where):
    """One command, as a user runs it after the quick start: after the commands of its page whose files it reads,
    in a new shell. Every page that shows it checks what it printed in its own words."""
    for page, _ in where:
        for earlier in needs(line, page):
            before = project.line(earlier)
            assert before.returncode == 0, f"{page}: {earlier!r}, which {line!r} reads, failed:\n{before.stderr}"
    result = project.line(line)
    assert result.returncode == 0, f"command failed: {line}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    if line == readme_marked("test-command"):  # installed the test extras and collected the suite, not run it
        collected = int(re.search(r"(\d+) tests collected", result.stdout).group(1))
        assert collected > 1000, result.stdout[-500:]
    elif line == fast_lane():
        counted = re.search(r"(\d+)/(\d+) tests collected \((\d+) deselected\)", result.stdout)
        picked, total, left_out = map(int, counted.groups())
        assert picked > 1000 and left_out > 0 and picked + left_out == total, result.stdout[-500:]
    else:
        (check,) = checks_for(line)  # test_docs_site.py: every command has one
        for page, _ in where:
            text = (ROOT / page).read_text()
            if "line" in check.__code__.co_varnames[: check.__code__.co_argcount]:
                check(result.stdout, text, project.root, line)
            else:
                check(result.stdout, text, project.root)
    # what the commands write is in scratch/ (and the figures they are meant to redraw): nothing else in the project
    wrote = ("ckpt", "full.safetensors", "step.json", "step.png", "sweep.png")
    assert not [p for p in wrote if (project.root / p).exists()], line


def test_every_check_meets_its_command_and_what_is_not_run_is_named():
    """Each check of CHECKS matches a command a page runs (a page's command was not lost), and the commands left
    out are the marked ones: the GPU suite, opening the notebooks in JupyterLab (a server waiting for a browser; the
    nbconvert command beside it runs a notebook from the same install, test_notebooks_extra.py checks that the extra
    provides `jupyter lab`, and test_instructor_kit.py runs `zerosim notebooks --out`), and installing torch for the
    parity kit (its tests skip without it). The fast lane is the README's, beside the test command."""
    runs = [line for line, _ in RUN]
    assert {check for _, check in CHECKS} == {check for line in runs for check in checks_for(line)}, runs
    assert readme_marked("main-command") in runs and readme_marked("test-command") in runs
    assert [line for line, runnable, _ in shown() if runnable] == [line for line in runs if line != fast_lane()]
    assert all("gpu" in line or line.endswith(("jupyter lab notebooks/", "jupyter lab zerosim-notebooks"))
               or "zerosim parity" in line for line in LEFT_OUT), LEFT_OUT
    ignored = subprocess.run(["git", "check-ignore", "-q", "scratch/x"], cwd=ROOT)
    assert ignored.returncode == 0, "scratch/ must be ignored by git"


@pytest.mark.parametrize("marker", ["main-command", "test-command"])
def test_ci_runs_the_command_the_readme_shows(tmp_path, marker):
    """`.ci/readme-command` (what .ci/run runs and .ci/versions reads its extras from) prints the README's own line,
    as this file reads it; on a README that lost the marker it prints nothing and fails, naming the marker, so CI
    never runs an empty command."""
    ci = subprocess.run([ROOT / ".ci" / "readme-command", marker], capture_output=True, text=True, timeout=60)
    assert (ci.returncode, ci.stdout) == (0, readme_marked(marker) + "\n"), ci.stderr
    (tmp_path / ".ci").mkdir()
    shutil.copy(ROOT / ".ci" / "readme-command", tmp_path / ".ci")
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text().replace(f"<!-- {marker} -->", ""))
    lost = subprocess.run([tmp_path / ".ci" / "readme-command", marker], capture_output=True, text=True, timeout=60)
    assert (lost.returncode, lost.stdout) == (1, "") and f"<!-- {marker} -->" in lost.stderr, lost.stderr


def test_the_readme_sweep_claims_beside_the_command(tmp_path):
    # The paragraph after the sweep command quotes three more runs: seed 004's schedule (no --comm fsdp), 32k tokens,
    # and one 2,048-token sequence per rank.
    text = (ROOT / "docs" / "explanation" / "time.md").read_text()
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


def python_blocks() -> list:
    """[(page, code)] for every Python block of the README and the docs."""
    return [(page, code) for page in pages() for lang, code, _ in readme_blocks((ROOT / page).read_text())
            if lang == "python"]


@pytest.mark.parametrize("page, code", python_blocks(), ids=lambda x: x if "/" in str(x) or x == "README.md" else "")
def test_every_python_block_prints_what_its_comments_say(tmp_path, page, code):
    # Each block runs in a fresh interpreter, in an empty folder. Every `print` whose comment says `# → VALUE` must
    # print VALUE (the text before a ";" in the comment); the others say in words what they print. In the snippet of
    # use-from-python, the student (MLP.init_params, seed 0) must not be its teacher (make_regression's rng), or step
    # 1's losses are ~1e-5 and the example teaches nothing; targets of a random teacher give ~1 (the loss-scaling
    # lines printed t = 0 and [] before: the first step overflowed and was skipped).
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=SAFETY_TIMEOUT,
                            cwd=tmp_path)
    assert result.returncode == 0, f"{page}:\n{result.stderr}"
    printed = result.stdout.splitlines()
    prints = [line for line in code.splitlines() if line.lstrip().startswith("print(")]
    assert len(prints) == len(printed), (page, prints, printed)
    if "print(engine.step(batches), oracle.step(batches))" in code:
        engine_losses, oracle_losses = (json.loads(part) for part in re.findall(r"\[[^\]]*\]", printed[0]))
        assert engine_losses == oracle_losses
        assert all(0.1 < loss < 100 for loss in engine_losses), engine_losses
    quoted = [(line.split("# → ", 1)[1].split(";", 1)[0].strip(), out)  # (what the comment says, what was printed)
              for line, out in zip(prints, printed) if "# → " in line]
    assert all(value == out for value, out in quoted), (page, quoted)
