"""Where a run on a GPU and the same run on the CPU part, gradient by gradient (tools/gpu_session.sh runs it).

One device (CuPy) and the host each take 12 micro-batches of 8 rows through MLP([64, 256, 128, 32]), the
oracle's forward and backward (`Reference.gradient`; on the device with `device=`), in fp32 and in fp16-mixed, from
the same parameters; printed: how many of the 12 losses differ in any bit, and for each weight and bias how many of
its gradient's elements differ in any bit, summed over the micro-batches. Then the sums beneath: one fp32 array's
sum along its rows (a bias gradient's, Σ over the batch), over a whole vector, and a mean of squares (the loss's),
each on the device against NumPy's, bit for bit.

    python tools/gpu_gradients.py              # on a machine with CuPy and a CUDA device
    python tools/gpu_gradients.py --standin    # NumPy standing in for CuPy: checks the script, nothing more

Its output on an H200: docs/gpu_run/2026-11-29/gradients.log.
"""

import sys

import numpy as np

from zerosim import MLP, Cluster, Reference, get_optimizer


def main(standin: bool) -> None:
    ns = Cluster(1, backend="cupy-sim", **({"xp": "numpy-standin"} if standin else {})).backend.xp
    model = MLP([64, 256, 128, 32])
    params = model.init_params(np.random.default_rng(7))
    rng = np.random.default_rng(1)
    rng.standard_normal((8, 64)), rng.standard_normal((8, 32))  # a micro-batch set aside, as the logged run drew it
    for precision in ("fp32", "fp16-mixed"):
        host = Reference(model, get_optimizer("adam"), precision, 1, params=params)
        device = Reference(model, get_optimizer("adam"), precision, 1, params=params, device=ns)
        differ, losses = {}, 0
        for _ in range(12):
            x = rng.standard_normal((8, 64)).astype(np.float32)
            t = rng.standard_normal((8, 32)).astype(np.float32)
            loss_h, grad_h = host.gradient(x, t)
            loss_d, grad_d = device.gradient(ns.from_host(x), ns.from_host(t))
            losses += loss_h != loss_d
            for i, s in enumerate(model.specs):
                a, b = (g[s.offset: s.offset + s.size].view(np.uint8).reshape(s.size, -1) for g in (grad_h, grad_d))
                key = f"{s.name}{i // 2} {s.shape}"
                differ[key] = differ.get(key, 0) + int((a != b).any(axis=1).sum())
        print(precision, "12 micro-batches: losses differ", losses, "| gradient elements that differ:", differ)
    if standin:
        return
    import cupy as cp

    a = rng.standard_normal((8, 256)).astype(np.float32)
    print("sum axis 0 same:", np.sum(a, axis=0).tobytes() == cp.asnumpy(cp.sum(cp.asarray(a), axis=0)).tobytes())
    a = rng.standard_normal((4096,)).astype(np.float32)
    print("sum 4096 same:", np.sum(a).tobytes() == cp.asnumpy(cp.sum(cp.asarray(a))).tobytes())
    y = rng.standard_normal((8, 32)).astype(np.float32)
    print("mean of squares same:",
          np.mean(y * y).tobytes() == cp.asnumpy(cp.mean(cp.asarray(y) * cp.asarray(y))).tobytes())


if __name__ == "__main__":
    main("--standin" in sys.argv[1:])
