"""Seed 001's statistical reading of Adam, measured: "m̂/√v̂ is approximately the signal-to-noise ratio of the
gradient".

Letters: μ a coordinate's mean gradient, σ its standard deviation, SNR = μ/σ, T steps.

zerosim's Adam (optim/_adam.py, seed 004's formula, fp32) runs T steps on gradients drawn per coordinate as
μ + σ·z (z standard normal); at the end each coordinate's m̂/√v̂ is read from the optimizer's own record. With β₁ the
average of the last ~1/(1 − β₁) gradients and β₂ that of the last ~1/(1 − β₂) squares, m̂ → μ and v̂ → μ² + σ², so

    m̂/√v̂  →  μ / √(μ² + σ²)  =  SNR / √(1 + SNR²)

a bounded function of the SNR: close to it where the gradient is mostly noise (SNR ≪ 1), and never above 1 in
size where it is mostly signal — on average: β₁ = 0.9 averages only ~19 gradients, so one coordinate's m̂/√v̂
scatters by about √((1 − β₁)/(1 + β₁)) ≈ 0.23 around it, more than the SNR itself below 0.2. So "approximately
the SNR" holds for noisy coordinates only; for a steady gradient Adam's step is lr·1 whatever the SNR (the
"invariant to the scale of the loss" half of the seed's reading holds exactly: multiply every gradient by c and
m̂/√v̂ does not change, up to ε).
"""

from __future__ import annotations


import numpy as np

from zerosim._dataclass import dataclass


@dataclass(frozen=True)
class SNRReading:
    snr: np.ndarray  # (C,) μ/σ per coordinate
    ratio: np.ndarray  # (C,) m̂/√v̂ at the last step, from zerosim's Adam, averaged over the repeats
    spread: np.ndarray  # (C,) its standard deviation over the repeats: one coordinate's m̂ averages ~19 gradients
    limit: np.ndarray  # (C,) SNR/√(1 + SNR²): where the average goes as T grows


def adam_snr(snrs=(0.01, 0.1, 0.3, 1.0, 3.0, 10.0), steps: int = 4000, sigma: float = 1e-3, repeats: int = 1024,
             seed: int = 0, betas=(0.9, 0.999)) -> SNRReading:
    """m̂/√v̂ after `steps` Adam steps on `repeats` coordinates per SNR (averaged over them), gradients μ + σ·z."""
    from zerosim.optim import Adam

    snrs = np.asarray(snrs, dtype=np.float64)
    rng = np.random.default_rng(seed)
    mu = np.repeat(snrs * sigma, repeats)  # (C·R,)
    opt = Adam(lr=0.0, betas=tuple(betas), eps=0.0)  # lr 0: the weights stay put, only m and v move
    w = np.zeros(mu.shape, np.float32)
    state = {"m": np.zeros_like(w), "v": np.zeros_like(w)}
    record = {}
    for t in range(1, steps + 1):
        g = (mu + sigma * rng.standard_normal(mu.shape)).astype(np.float32)
        opt.step(w, g, state, t, record if t == steps else None)
    ratio = (record["m_hat"].astype(np.float64) / np.sqrt(record["v_hat"].astype(np.float64)))
    ratio = ratio.reshape(len(snrs), repeats)
    return SNRReading(snrs, ratio.mean(axis=1), ratio.std(axis=1), snrs / np.sqrt(1.0 + snrs**2))
