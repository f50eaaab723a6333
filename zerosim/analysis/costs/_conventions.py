"""The byte-per-parameter conventions the seeds, the ZeRO paper and DeepSpeed use, side by side.

Letters: P = Ψ parameters, N ranks, L parameters of the largest layer. Each function returns a
`ConventionRow`: bytes per rank for stages 0-3 (None where the source gives no number) and a note on
where the numbers come from and why they differ from `memory.model_state_memory`.
"""

from __future__ import annotations


from zerosim._dataclass import dataclass
from zerosim.analysis.costs._memory import GB, MemoryConfig, model_state_memory_by_stage


@dataclass(frozen=True)
class ConventionRow:
    name: str
    bytes: tuple  # per rank, stages 0, 1, 2, 3; None where the source has no figure
    note: str
    erratum: tuple = ()  # stages whose printed figure disagrees with the source's own formula

    def gb(self) -> tuple:
        return tuple(None if b is None else b / GB for b in self.bytes)


def zerosim_parts(P, N, config: MemoryConfig | None = None) -> ConventionRow:
    """This package's named parts (`_memory.py`): 2 + 2 + 4 + K with Adam's K = 8, shards padded to ceil(P/N)."""
    config = config or MemoryConfig()
    rows = model_state_memory_by_stage(P, N, config)
    what = "pure fp32" if config.master_bytes == 0 else f"{config.param_bytes}-byte params"
    return ConventionRow(f"zerosim parts ({config.optimizer}, {what})", tuple(m.total for m in rows),
                         "named parts; the paper's numbers for Adam, shards padded to ceil(Ψ/N)")


def zero_paper(P, N, K: int = 12) -> ConventionRow:
    """Rajbhandari et al. 2020, Fig. 1: (2 + 2 + K)Ψ; 4Ψ + KΨ/N; 2Ψ + (2 + K)Ψ/N; (2 + 2 + K)Ψ/N.

    K = 12 for mixed-precision Adam: fp32 master (4) + momentum (4) + variance (4). Fig. 1 (Ψ = 7.5B,
    N = 64) prints 120 / 31.4 / 16.6 / 1.9 GB: the exact values 31.40625, 16.640625, 1.875 rounded.
    """
    b = ((2 + 2 + K) * P, (2 + 2) * P + K * P / N, 2 * P + (2 + K) * P / N, (2 + 2 + K) * P / N)
    return ConventionRow(f"ZeRO paper (2+2+K)Ψ, K={K}", b, "K folds fp32 master + Adam m, v; 16-bit grads")


def seed001_formulas(P, N) -> ConventionRow:
    """Seed 001's ZeRO table: DDP 16P; ZeRO-1 4P + 12P/N; ZeRO-2 2P + 14P/N; ZeRO-3 16P/N."""
    b = (16 * P, 4 * P + 12 * P / N, 2 * P + 14 * P / N, 16 * P / N)
    return ConventionRow("seed 001 formulas (16P)", b, "2 + 2 + 12: the paper's accounting with K = 12")


def seed001_adan(P, N) -> ConventionRow:
    """Seed 001's Adan: 2 + 2 + 4 + 12 (m, v, n) + 2 (g_prev in 16 bits) = 22 bytes/param at stage 0.

    zerosim's Adan keeps g_prev in fp32 (4 bytes: 24 bytes/param); the seed's 2 assumes a 16-bit copy.
    Sharded as the seed's other formulas: 4P + 18P/N; 2P + 20P/N; 22P/N.
    """
    b = (22 * P, 4 * P + 18 * P / N, 2 * P + 20 * P / N, 22 * P / N)
    return ConventionRow("seed 001 Adan (g_prev in 16 bits)", b, "22 bytes/param; zerosim keeps g_prev in fp32: 24")


def seed002_pure_fp32(P, N) -> ConventionRow:
    """Seed 002's pure fp32 training: params 4 + grads 4 + Adam m 4 + v 4 = 16 bytes/param, no master,
    "on every replica" — plain data parallel, so it gives no ZeRO figures (GPT-3 175B: 2800 GB)."""
    return ConventionRow("seed 002 pure fp32 (4+4+8)", (16 * P, None, None, None), "on every replica: 175B x 16 = 2800 "
                                                                                   "GB")


SEED001_PRINTED_GB = (112.0, 21.5, 15.75, 14.0)  # seed 001's table "For 8 GPUs and a 7B model", as printed


def seed001_printed_table() -> ConventionRow:
    """Seed 001's printed table for 7B on 8 GPUs (112 / 21.5 / 15.75 / 14 GB), checked against its formulas.

    ERRATUM: its own formulas give 112 / 38.5 / 26.25 / 14 GB. 15.75 equals 18P/N (or 2P + 2P/N);
    21.5 fits no aP + bP/N with small half-integer a, b that we could find. Shown, never used as a target.
    """
    printed = tuple(gb * GB for gb in SEED001_PRINTED_GB)
    formulas = seed001_formulas(7e9, 8).bytes
    bad = tuple(s for s in range(4) if printed[s] != formulas[s])
    want = " / ".join(f"{b / GB:g}" for b in formulas)
    note = (f"ERRATUM: printed for 7B on 8 GPUs; its own formulas give {want} GB, "
            f"so stages {', '.join(map(str, bad))} disagree") if bad else "agrees with its formulas"
    return ConventionRow("seed 001 printed table (7B, N=8)", printed, note, bad)


def seed003_table(P, N, fp32_grad_accum: bool = False) -> ConventionRow:
    """Seed 003: bf16 params 2 + bf16 grads 2 + fp32 (m, v, master) 12; 2P + 2P + 12P/N; 2P + 14P/N; 16P/N.

    It mentions fp32 gradient accumulation (grads 4P) but keeps 2P; pass fp32_grad_accum=True for 4P.
    """
    g = 4 if fp32_grad_accum else 2
    b = ((2 + g + 12) * P, (2 + g) * P + 12 * P / N, 2 * P + (g + 12) * P / N, (2 + g + 12) * P / N)
    return ConventionRow("seed 003 (2+2+12)", b, "same numbers as seed 001, bf16 instead of fp16")


def seed000_general(P, N, k: int = 2) -> ConventionRow:
    """Seed 000's M_base = (s16 + (1 + k)s32)Ψ = 2 + 4 + 8 = 14 bytes (k = 2 for Adam), no gradients.

    Sharded stage by stage with its S_p, S_o indicators (params by S_p, master + k moments by S_o).
    It leaves gradients out ("short lived"), so ZeRO-2 saves nothing over ZeRO-1 here; its M3 is this 14Ψ/N.
    """
    opt = (1 + k) * 4 * P
    b = (2 * P + opt, 2 * P + opt / N, 2 * P + opt / N, (2 * P + opt) / N)
    return ConventionRow("seed 000 general (2+4+8)", b, "no gradient term: ZeRO-2 equals ZeRO-1")


def seed000_printed_stages(P, N) -> ConventionRow:
    """Seed 000's printed M_base, M1, M2, M3: 14Ψ; s16Ψ + s32Ψ + s32Ψ/N; s16Ψ + 2s32Ψ/N; 14Ψ/N.

    M1 and M2 come from its indicator formula, which has one s32 term for all optimizer state (no k)
    and an fp32 gradient (α = 1); M_base and M3 use (s16 + (1+k)s32) and no gradient. Not one accounting.
    """
    b = (14 * P, 2 * P + 4 * P + 4 * P / N, 2 * P + 8 * P / N, 14 * P / N)
    return ConventionRow("seed 000 printed M1..M3", b, "M1/M2 drop Adam's moments; M_base/M3 drop grads")


def deepspeed_estimators(P, N, largest_layer=None) -> ConventionRow:
    """DeepSpeed's estimators without offload (deepspeed/runtime/zero/stage_1_and_2.py, stage3.py).

    estimate_zero2_model_states_mem_needs: 2P + int(18P/N); its source comment: 2 = 16-bit params,
    18 = 2 (16-bit grads) + 4 (fp32 grads) + 4 (fp32 params) + 8 (Adam momentum and variance).
    estimate_zero3_model_states_mem_needs: 4L + int(18P/N), L = the largest module's own parameters;
    the source does not explain 4L (our reading: the largest layer gathered whole, 16-bit params and
    grads, 2L + 2L). Older revisions of the ZeRO-2 estimator used 4P + 16P/N. No stage 0/1 estimator.
    """
    z3 = None if largest_layer is None else 4 * int(largest_layer) + int(18 * P / N)
    return ConventionRow("DeepSpeed estimators", (None, None, 2 * int(P) + int(18 * P / N), z3),
                         "counts fp32 grads too (18 = 2+4+4+8); ZeRO-3 adds 4L; prints GiB")


def conventions_table(
    params, ranks: int, largest_layer=None, optimizer: str = "adam", precision: str = "fp16-mixed"
) -> list:
    """The rows above for Ψ = params on N = ranks; seed 001's printed row only for its own 7B / 8 case,
    its Adan row beside zerosim's when the optimizer is Adan, seed 002's when the precision is fp32."""
    rows = [
        zerosim_parts(params, ranks, MemoryConfig.for_precision(precision, optimizer=optimizer)),
        zero_paper(params, ranks),
        seed001_formulas(params, ranks),
    ]
    if precision == "fp32":
        rows.append(seed002_pure_fp32(params, ranks))
    if optimizer == "adan":
        rows.append(seed001_adan(params, ranks))
    if (params, ranks) == (7e9, 8):
        rows.append(seed001_printed_table())
    rows += [seed003_table(params, ranks), seed000_general(params, ranks), seed000_printed_stages(params, ranks),
             deepspeed_estimators(params, ranks, largest_layer)]
    return rows


def format_table(rows) -> str:
    """Plain-text table: one line per convention, GB (1e9 bytes) per stage, then the note."""
    head = f"{'convention':34s} {'stage 0':>9s} {'stage 1':>9s} {'stage 2':>9s} {'stage 3':>9s}  note"
    lines = [head]
    for r in rows:
        cells = " ".join(f"{'-':>9s}" if g is None else f"{g:9.3f}" for g in r.gb())
        lines.append(f"{r.name:34s} {cells}  {r.note}")
    return "\n".join(lines)
