"""Record DeepSpeedCPUAdam's own results on seeded random inputs, for tests/test_cpu_adam.py to replay without it.

    pip download deepspeed && pip install --no-deps --no-build-isolation deepspeed-*.tar.gz   # DS_BUILD_OPS=0
    DS_ACCELERATOR=cpu python tools/record_ds_cpu_adam.py > tests/data/ds_cpu_adam.json

DeepSpeed's CPUAdamBuilder compiles csrc/adam/cpu_adam_impl.cpp with this machine's g++ on first use (JIT). Each case
draws params and K steps of gradients from its seed (`case_inputs`, which the test shares), steps the real optimizer,
and stores the bits of the final params, exp_avg and exp_avg_sq as hex.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from cpu_adam_cases import CASES, case_inputs  # noqa: E402


def run_case(case: dict) -> dict:
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    w0, grads = case_inputs(case)
    dtype = torch.float32 if case["params"] == "fp32" else torch.bfloat16
    p = torch.tensor(w0).to(dtype)
    opt = DeepSpeedCPUAdam([p], lr=case["lr"], betas=tuple(case["betas"]), eps=case["eps"],
                           weight_decay=case["weight_decay"], adamw_mode=case["adamw_mode"],
                           bias_correction=case["bias_correction"])
    for g in grads:
        p.grad = torch.tensor(g).to(dtype)
        opt.step()
    state = opt.state[p]
    as_hex = lambda t: t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).numpy().astype(
        np.uint16 if t.dtype == torch.bfloat16 else np.uint32).tobytes().hex()
    return {"out_params": as_hex(p.data), "exp_avg": as_hex(state["exp_avg"]),
            "exp_avg_sq": as_hex(state["exp_avg_sq"])}


def main() -> None:
    import deepspeed

    out = {"deepspeed": deepspeed.__version__, "cases": [dict(case, **run_case(case)) for case in CASES]}
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
