"""The prediction questions of the notebooks on memory (03 by stage, 04 activations, 09 will it fit, 14 offload): one
per section, each computing its answer from zerosim (a ledger, a meta-backend run, the fit), as _questions.py's do.
"""

from __future__ import annotations

from functools import lru_cache

from zerosim.teaching._predict import Question

GB = 1e9


def _ownership(stage: int) -> float:
    """Seed 001's layout measured (notebook 03's figure): GPU 0's bytes at rest at `stage`, 4 GPUs."""
    from zerosim.models import MLP
    from zerosim.viz import measure_ownership

    return measure_ownership(MLP([16, 32, 32, 8]))[stage]["bytes"][0]  # ownership_figure's model


def _second_order_split(n: int) -> float:
    from zerosim.analysis.costs import get_preset, second_order_memory
    from zerosim.models.llama import MetaLlama

    return second_order_memory(MetaLlama.from_config(get_preset("llama-2-7b").config, 4096), n).split


def _one_block() -> float:
    """Notebook 04's GPT block (B = 2, L = 8, d = 16, H = 4, V = 11) in fp16: bytes its ledger saves for backward."""
    import numpy as np

    from zerosim.cluster import MemoryLedger
    from zerosim.models import GPT, loss_and_grad

    gpt = GPT(11, 16, 4, n_layers=1, seq_len=8)
    rng = np.random.default_rng(0)
    ids, targets = rng.integers(0, 11, (2, 8)), rng.integers(0, 11, (2, 8))
    ledger = MemoryLedger(rank=0)
    loss_and_grad(gpt, gpt.init_params(rng), ids, targets, "fp16", ledger=ledger)
    return sum(e.nbytes for e in ledger.timeline if e.action == "alloc" and e.kind == "activations"
               and e.name.startswith("block0."))


@lru_cache(maxsize=1)
def _gpt7b_activations() -> float:
    """Seed 001's 7B GPT (d 4096, 32 layers, H 32), B = 4, L = 2048, fp16-mixed, one rank: activations at the peak."""
    from zerosim import Adam, Cluster, ZeroEngine
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT

    model = MetaGPT(GPT(50257, 4096, 32, 32, 2048))
    engine = ZeroEngine(model, Cluster(1, backend="meta"), 0, Adam(), "fp16-mixed", checkpoint=model.checkpointing)
    engine.step(model.batches(engine.cluster, 4))
    return engine.cluster.ranks[0].ledger.peak("activations") / GB


def _p_recompute_gflop() -> float:
    from zerosim.analysis.costs import recompute_table

    return recompute_table(4, 2048, 4096, 32)[-1].flops / 1e9


def _embed_life() -> float:
    from zerosim.analysis.costs import lifetimes
    from zerosim.models import GPT
    from zerosim.models.gpt import MetaGPT

    born, freed = lifetimes(MetaGPT(GPT(11, 16, 4, 3, 8)), 2, 8)["embed.input"]
    return 100 * (freed - born)


def _zero3_activations() -> float:
    """GPT-3 6.7B on 8 GPUs at ZeRO-3, B = 4, L = 2048, no checkpointing: the activations' peak per GPU, GB."""
    from zerosim.analysis.costs import get_preset, measure_stage
    from zerosim.models.gpt import MetaGPT

    row = measure_stage(MetaGPT.from_preset(get_preset("gpt3-6.7b")), 8, 3, micro_batch=(4, 2048))[0]
    return row["peak_by_kind"]["activations"] / GB


def _llama3_params() -> float:
    from zerosim.models.hf import read_hf_config, shipped_config

    return read_hf_config(shipped_config("llama-3-8b")).num_params


def _llama3_k_mb() -> float:
    from zerosim.analysis.costs import measure_activations
    from zerosim.models.hf import read_hf_config, shipped_config
    from zerosim.models.llama import MetaLlama

    twin = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), 4096)
    return measure_activations(twin, 1, 4096, "bf16-mixed").per_block["K"] / 1e6


@lru_cache(maxsize=2)
def _llama3_peak(strategy: str, stage: int) -> int:
    """Llama-3-8B on 8 GPUs, B = 1, L = 4096, bf16-mixed, Adam: rank 0's measured peak (notebook 09's table)."""
    from zerosim.analysis.costs import measure_stage
    from zerosim.models.gpt import strategy_options
    from zerosim.models.hf import read_hf_config, shipped_config
    from zerosim.models.llama import MetaLlama

    model = MetaLlama.from_config(read_hf_config(shipped_config("llama-3-8b")), 4096, **strategy_options(strategy))
    return measure_stage(model, 8, stage, "adam", "bf16-mixed", micro_batch=(1, 4096))[0]["peak"]


def _a100_estimates() -> float:
    from zerosim.analysis.costs import get_gpu
    from zerosim.analysis.reports import judge

    return judge(_llama3_peak("none", 2), 2, 8, get_gpu("a100-80gb"), 0.05)["overheads_total"] / GB


def _planner_3090_stage() -> float:
    """The planner's fastest configuration for Llama-3-8B on 8 RTX 3090s (L = 4096, a global batch of 64)."""
    from zerosim.analysis.planner import plan
    from zerosim.models.hf import read_hf_config, shipped_config

    return plan(read_hf_config(shipped_config("llama-3-8b")), 8, 8, "rtx3090", 4096, 64).fitting[0].stage


@lru_cache(maxsize=1)
def _offload_runs():
    """Notebook 14's small MLP (4 ranks, ZeRO-2, DeepSpeedCPUAdam's arithmetic) on the device and offloaded with DPU:
    the first step whose mean loss differs."""
    import numpy as np

    from zerosim import MLP, Cluster, ZeroEngine, get_optimizer
    from zerosim.models import make_regression
    from zerosim.parallel.offload import Offload

    widths, n, steps = [16, 64, 64, 4], 4, 20
    data = make_regression(np.random.default_rng(0), steps * n, 16, widths)
    params = MLP(widths).init_params(np.random.default_rng(1))

    def losses(parallelisms):
        engine = ZeroEngine(MLP(widths), Cluster(n), 2, get_optimizer("adam", lr=3e-3, formula="deepspeed-cpu"),
                            "bf16-mixed", params=params, parallelisms=parallelisms)
        return [float(np.mean(engine.step(data[s * n:(s + 1) * n]))) for s in range(steps)]

    plain, delayed = losses(()), losses((Offload("cpu", dpu=True, dpu_warmup=10),))
    return next(s + 1 for s, (a, b) in enumerate(zip(plain, delayed)) if a != b)


def _offload_cpu_exposed() -> float:
    """13B on one V100, ZeRO-Offload without DPU, 16,384 tokens: the CPU step's seconds the device waits through."""
    from zerosim.analysis.costs import get_host
    from zerosim.analysis.planner import meta_step
    from zerosim.analysis.timeline import Hardware, step_window
    from zerosim.models.meta import MetaModel
    from zerosim.parallel.offload import Offload

    dgx2 = get_host("dgx-2")
    hw = Hardware("v100", compute="fp16", pcie=dgx2.pcie, host_bandwidth=dgx2.cpu_bandwidth(1))
    result, _ = meta_step(MetaModel.from_params(13_000_000_000, layers=40), 1, 2, hw, tokens=16384, steps=2,
                          parallelisms=(Offload("cpu"),))
    w = step_window(result)
    return w.uncovered["cpu"] / w.busy["cpu"]


def _nvme_bytes_gb() -> float:
    """Llama-2-7B on 8 GPUs at ZeRO-3 with the optimizer and the parameters on NVMe: one rank's NVMe ledger, GB."""
    from zerosim.analysis.costs import get_preset, measure_stage
    from zerosim.models.gpt import strategy_options
    from zerosim.models.llama import MetaLlama
    from zerosim.parallel.offload import Offload

    llama = MetaLlama.from_config(get_preset("llama-2-7b").config, 4096, **strategy_options("block"))
    _, cluster, _ = measure_stage(llama, 8, 3, "adam", "bf16-mixed", micro_batch=(1, 4096),
                                  parallelisms=(Offload("nvme", "nvme"),))
    return cluster.ranks[0].ledger_of("nvme").peak() / GB


QUESTIONS_MEMORY = (
    # -- notebook 03: memory by stage --
    Question("ownership-zero2", "Seed 001's layout: 1,864 parameters on 4 GPUs, fp16-mixed, Adam. How many bytes does "
             "GPU 0 hold at rest at ZeRO-2?", "B", lambda: _ownership(2),
             "At ZeRO-2 a GPU keeps the whole fp16 model (2P) and a quarter of everything else: the gradients (2P/4) "
             "and the optimizer states (12P/4): 2·1,864 + 14·1,864/4 = 10,252 B.",
             wrong=((lambda: _ownership(1), "ZeRO-1's: there the gradients stay whole."),
                    (lambda: _ownership(3), "ZeRO-3's: there the weights are sharded too."))),
    Question("shampoo-split-1024", "Llama-2-7B on 1,024 GPUs: ZeRO cuts its flat buffer into 1,024 equal shards. How "
             "many of its 226 weight matrices does a shard boundary cut?", "", lambda: _second_order_split(1024),
             "With 1,024 shards of 6.6M parameters each and matrices of 16.8M to 131M, every matrix spans several "
             "shards: all 226 are cut, so no rank holds a whole matrix for Shampoo's or K-FAC's factors.",
             wrong=((lambda: _second_order_split(8), "the count on 8 GPUs: 8 shards cut fewer matrices."),
                    (0, "none: shard boundaries fall wherever the flat buffer's equal pieces end."))),
    # -- notebook 04: activations --
    Question("one-block-bytes", "One GPT block, B = 2, L = 8, d = 16, H = 4, fp16: how many bytes does it keep for "
             "backward?", "B", _one_block,
             "14·B·L·d·2 = 7,168 B of linear tensors (the block's input, Q, K, V, attention output, the FFN's 4d-wide "
             "x1 and x2, ...), B·H·L²·2 = 1,024 B for P, and the two norms' fp32 statistics 4·B·L·4 = 256 B: 8,448.",
             wrong=((7168, "the linear terms only: P (B·H·L²) is kept too."),
                    (8192, "without the norms' fp32 mean and rstd, 4·B·L·4 = 256 B."))),
    Question("gpt7b-activations", "Seed 001's 7B GPT (32 layers, d 4096, H 32), B = 4, L = 2048, fp16, no "
             "checkpointing: all its activations at the peak, in GB?", "GB", _gpt7b_activations,
             "Each layer keeps 2,013,396,992 B (940 MB of linear terms and 1,074 MB of P); 32 layers are 64.4 GB, "
             "and the embeddings', the head's and the loss's tensors add the rest: 66.1 GB.",
             tolerance=0.005,
             wrong=((32 * 2_013_396_992 / GB, "32 layers alone: the embedding, the head and the loss keep tensors "
                                             "too."),
                    (32 * 939_524_096 / GB, "the linear terms of 32 layers: P adds more than as much again."))),
    Question("p-recompute-gflop", "Recomputing P for one layer of seed 001's shape (B = 4, L = 2048, d = 4096, H = "
                                  "32): "
             "how many GFLOP does zerosim count? Seed 001 says ≈ 70.", "GFLOP", _p_recompute_gflop,
             "QKᵀ is B·H·L²·d_h = 68.7 G multiply-adds; a multiply-add is 2 FLOPs (137.4 G), and the scaling and "
             "softmax over the B·H·L² scores add a few more: 140.7 GFLOP.",
             tolerance=0.005,
             wrong=((68.7, "the multiply-adds: each is two FLOPs."), (70, "seed 001's count: it counts "
                                                                         "multiply-adds."))),
    Question("embed-input-life", "One step of a 3-block GPT: for what share of the pass, in percent, does the "
             "embedding's input live?", "%", _embed_life,
             "It is born first (the ids) and freed last, by the embedding's backward at the very end: 100 %. The "
             "later a tensor is saved in forward, the sooner backward frees it (seed 001's retention contract).",
             wrong=((33, "a block's third: the embedding's input outlives every block."),
                    (50, "half: its backward comes last, not halfway."))),
    Question("zero3-activations", "GPT-3 6.7B on 8 GPUs at ZeRO-3, B = 4, L = 2048, no checkpointing: activations per "
                                  "GPU "
             "at the peak, in GB?", "GB", _zero3_activations,
             "ZeRO shards model states, never activations: every GPU runs its own micro-batch and keeps all of it, "
             "66.1 GB at any stage. Checkpointing (or more GPUs in TP) is what shrinks them.",
             tolerance=0.005,
             wrong=((lambda: _zero3_activations() / 8, "divided over 8 GPUs: ZeRO does not shard activations."),)),
    # -- notebook 09: will it fit --
    Question("llama3-8b-params", "Llama-3-8B's config.json: d = 4096, 32 layers, 8 key/value heads of 128, F = 14,336, "
             "V = 128,256, untied embeddings. How many parameters?", "", _llama3_params,
             "Each layer: attention 4096·(4096 + 2·1024 + 4096) and the MLP 3·4096·14,336, 218M; 32 layers 6.98B; the "
             "two 128,256 × 4096 embedding matrices add 1.05B: 8,030,261,248.",
             tolerance=0.01,  # within 1 %: what is asked is where the eight billion come from
             wrong=((6_738_415_616, "Llama-2-7B's: Llama 3's vocabulary is four times larger."),
                    (6_979_321_856, "the 32 layers alone: the untied embedding and head add a billion."))),
    Question("llama3-k-mb", "Llama-3-8B, L = 4096, B = 1, bf16: how many MB does one layer's K take (8 key/value "
             "heads of 128)?", "MB", _llama3_k_mb,
             "K is B·L·G·d_h = 4096·8·128 values of 2 bytes: 8.39 MB, a quarter of Q's 33.6 MB: grouped-query "
             "attention keeps 8 key/value heads for 32 query heads.",
             tolerance=0.001,
             wrong=((33.554432, "Q's size: GQA keeps a quarter as many key/value heads."),)),
    Question("llama3-zero3-block-peak", "Llama-3-8B on 8 GPUs, ZeRO-3, block checkpointing, L = 4096: rank 0's "
             "measured peak in GB?", "GB", lambda: _llama3_peak("block", 3) / GB,
             "16Ψ/8 = 16.1 GB of model states, plus the block inputs kept for recompute and one block rebuilt, plus a "
             "gathered unit and the fp32 gradient at the step: 20.1 GB, under an RTX 3090's 24 GB before the "
             "estimates.",
             tolerance=0.005,
             wrong=((16.06, "the model states alone, 16Ψ/N: activations and a gathered unit come on top."),)),
    Question("a100-estimates", "Llama-3-8B at ZeRO-2 without checkpointing on an A100 80GB: the measured peak is "
             "82.7 GB. How many GB do the labelled estimates (CUDA context, NCCL buffers, the allocator's 5 %) add?",
             "GB", _a100_estimates,
             "CUDA context 0.29 GB, NCCL's buffers 1.06 GB, and the caching allocator's reserve, 5 % of the peak, 4.14 "
             "GB: 5.48 GB, which turns 'fits' into 'does not fit' here.",
             tolerance=0.005,
             wrong=((0, "none: what no ledger sees still takes memory on a real GPU."),
                    (4.14, "the allocator's reserve alone: the CUDA context and NCCL's buffers come on top."))),
    Question("planner-3090-stage", "The planner, Llama-3-8B on 8 RTX 3090s (24 GB), sequences of 4,096, a global "
             "batch of 64: which ZeRO stage does its fastest configuration that fits use?", "",
             _planner_3090_stage,
             "ZeRO-3 (with block checkpointing): below stage 3 every GPU holds the whole bf16 model, 16 GB of its "
             "24, and the optimizer's shards and the activations do not fit beside it. On a larger GPU lower stages "
             "fit too (ZeRO-1 on an H200) and communicate less, but under DeepSpeed's defaults backward waits for "
             "their gradient reductions (overlap_comm is on at ZeRO-3 only), so ZeRO-3 still comes first there.",
             wrong=((2, "ZeRO-2: it keeps the whole 16 GB of bf16 weights on every 24 GB GPU."),
                    (0, "plain data parallel: 16 bytes a parameter, 128 GB a GPU."))),
    # -- notebook 14: offload --
    Question("dpu-first-diff", "The small MLP with DPU after 10 warm-up steps: at which step does its mean loss first "
             "differ from the run without DPU?", "", _offload_runs,
             "The 10 warm-up steps update as usual, and step 11 still runs on the latest parameters: its own update "
             "is the first held back. So step 12's forward is the first on stale parameters, and its loss the first "
             "that differs.",
             wrong=((11, "step 11: the update it makes is the first one delayed; its forward still sees the latest "
                         "parameters."),
                    (1, "from the first step: DPU waits for its warm-up."))),
    Question("offload-cpu-exposed", "13B on one V100 with ZeRO-Offload, no DPU: what share of the CPU's optimizer step "
             "does the GPU wait through (1 = all of it)?", "", _offload_cpu_exposed,
             "DeepSpeed's step() is synchronous without DPU: the device starts the next forward only when the CPU "
             "step and the copy back are done, so all of the CPU step is exposed.",
             wrong=((0, "none: without DPU nothing runs beside the CPU step."),
                    (0.5, "half: nothing of the GPU's work overlaps the CPU step here."))),
    Question("nvme-gb", "Llama-2-7B on 8 H100s, ZeRO-3 with the optimizer and the parameters on NVMe (ZeRO-Infinity): "
             "how many GB does one rank keep on NVMe?", "GB", _nvme_bytes_gb,
             "Everything sharded goes to the drives: the fp16 parameter shard, the fp32 master and Adam's m, v — "
             "(2 + 4 + 8)Ψ/8 — and the reads and writes of a step are what the NVMe row shows.",
             tolerance=0.01,
             wrong=((16 * 6_738_415_616 / 8 / GB, "16Ψ/N: the gradient shard stays in host memory."),)),
)
