"""Run DeepSpeed itself, on a CPU with gloo, on the cases zerosim's tests derive by hand for ZeRO-1 with
grad_accum_dtype fp32 (issue 33). Not part of the test suite: DeepSpeed and torch are not zerosim dependencies.

    python -m venv /tmp/ds && /tmp/ds/bin/pip install torch numpy hjson msgpack ninja packaging psutil py-cpuinfo \
        pydantic tqdm einops
    DS_BUILD_OPS=0 /tmp/ds/bin/pip install --no-deps --no-build-isolation deepspeed==0.19.8   # or 0.19.6
    DS_ACCELERATOR=cpu /tmp/ds/bin/python tools/deepspeed_cpu_check.py

Three cases, each spawning its ranks on 127.0.0.1 (gloo), static loss scale 1, no clipping, SGD lr 1:
  local    2 ranks, fp16 Linear(4, 1) without bias, rank 0's input [1, 2, 3, 4], rank 1's ten times that: the fp32
           partition after one step is -(the gradient the optimizer read). DeepSpeed 0.19.8 gives the mean,
           [-5.5, -11, -16.5, -22]; 0.19.6 gives each owner its own local gradient, [-1, -2] and [-30, -40]
  table    tests/test_bucket_allreduce.py ACCUM_TABLE: 3 ranks, fp16 Linear(1, 3), K = 2; what
           DeepSpeedZeroOptimizer.allreduce_bucket returns, times K (DeepSpeed divides the loss gradient by K).
           0.19.6 gives the table's 0.19.6 column, 0.19.8 its 0.19.8 column
  bf16     tests/test_bf16_optimizer.py BF16_TABLE: 3 ranks, bf16 Linear(1, 1) -> BF16_Optimizer; its fp32 gradient
           buffer after the reduction, for communication_data_type bf16 and fp32: 1.5390625 and 1.546875

On a CPU torch's `div_` divides where CUDA multiplies by the reciprocal (zerosim/zero/divide_factors.py); for the
table's rows both give the same bits (every rank holds the same values, so gloo's order does not matter either).
DeepSpeed needs `is_fp16_supported` on its CPU accelerator for fp16; this script patches it to True.
"""

from __future__ import annotations

import os
import sys

CASES = ("local", "table", "bf16")


def _setup(rank: int, world: int, port: int):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    get_accelerator().is_fp16_supported = lambda: True
    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed


def _config(precision: str, k: int = 1, **more) -> dict:
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": k, "gradient_clipping": 0.0,
            "zero_optimization": {"stage": 1}, precision: {"enabled": True, **({"loss_scale": 1.0} if precision ==
                                                                                "fp16" else {})},
            "optimizer": {"type": "SGD", "params": {"lr": 1.0}}, "zero_allow_untested_optimizer": True,
            "data_types": {"grad_accum_dtype": "fp32"}, **more}


def _zeroed(torch, model):
    for p in model.parameters():
        torch.nn.init.zeros_(p)
    return model


def local(rank: int, port: int) -> None:
    import torch

    deepspeed = _setup(rank, 2, port)
    model = _zeroed(torch, torch.nn.Linear(4, 1, bias=False))
    engine, _, _, _ = deepspeed.initialize(config=_config("fp16"), model=model, model_parameters=model.parameters())
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float16) * (10 if rank else 1)
    engine.backward(engine(x).sum())
    engine.step()
    print(f"local rank {rank}: fp32 partition {[p.tolist() for p in engine.optimizer.single_partition_of_fp32_groups]}",
          flush=True)


def table(rank: int, port: int) -> None:
    import torch
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    rows = [(1.0, 2**-11), (1.125, 2**-11), (1.0, 3 * 2**-12)]  # (k0, k1) of ACCUM_TABLE
    seen, original = [], DeepSpeedZeroOptimizer.allreduce_bucket

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        seen.append(out.detach().clone())
        return out

    DeepSpeedZeroOptimizer.allreduce_bucket = spy
    deepspeed = _setup(rank, 3, port)
    model = _zeroed(torch, torch.nn.Linear(1, 3))
    engine, _, _, _ = deepspeed.initialize(config=_config("fp16", k=2), model=model,
                                           model_parameters=model.parameters())
    for k in range(2):  # d loss / d out_j = rows[j][k]; x = 1, so w_j and b_j get the same gradient
        engine.backward((engine(torch.ones(1, 1, dtype=torch.float16)) *
                         torch.tensor([[r[k] for r in rows]], dtype=torch.float16)).sum())
        engine.step()
    if rank == 0:
        print("table: reduced bucket [w0 w1 w2 b0 b1 b2] x K:", [(2 * t.double()).tolist() for t in seen], flush=True)


def bf16(rank: int, port: int) -> None:
    import torch

    for comm in (None, "fp32"):
        deepspeed = _setup(rank, 3, port) if comm is None else sys.modules["deepspeed"]
        model = _zeroed(torch, torch.nn.Linear(1, 1))
        config = _config("bf16", **({"communication_data_type": comm} if comm else {}))
        engine, _, _, _ = deepspeed.initialize(config=config, model=model, model_parameters=model.parameters())
        engine.backward((engine(torch.ones(1, 1, dtype=torch.bfloat16)) *
                         torch.tensor([[198 / 128]], dtype=torch.bfloat16)).sum())
        if rank == 0:
            print(f"bf16 ({type(engine.optimizer).__name__}, communication_data_type {comm or 'bf16'}): fp32 gradient "
                  f"buffer {engine.optimizer.fp32_groups_gradients_flat[0].tolist()}", flush=True)


def _run(rank: int, case: str, port: int) -> None:
    globals()[case](rank, port)
    import torch.distributed as dist

    dist.barrier()


def main() -> None:
    import deepspeed
    import torch.multiprocessing as mp

    print(f"DeepSpeed {deepspeed.__version__}")
    for i, case in enumerate(sys.argv[1:] or CASES):
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
        mp.spawn(_run, args=(case, 29500 + 10 * i), nprocs={"local": 2}.get(case, 3))


if __name__ == "__main__":
    main()
