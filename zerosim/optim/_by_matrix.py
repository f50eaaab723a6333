"""Stepping a matrix optimizer (Muon) over a flat parameter vector, one parameter tensor at a time.

A 2-D parameter is its own matrix; a 1-D one (a bias) is treated as a 1 x n matrix, for which
Newton-Schulz just normalises the vector. The flat vector may be padded past the last parameter:
padding is left alone.
"""

from __future__ import annotations


def matrix_shape(shape) -> tuple:
    """The 2-D shape Muon sees for a parameter of `shape`."""
    if len(shape) == 2:
        return tuple(shape)
    size = 1
    for n in shape:
        size *= n
    return (1, size)


def step_by_matrix(optimizer, specs, w, g, state: dict, t: int, record: dict | None = None) -> None:
    """optimizer.step_matrix on every parameter's views of the flat w, g and state (all updated in place); a
    parameter the optimizer keeps off Muon (`is_matrix` False: MuonAdamW's embeddings, head, norms, biases) steps
    with its elementwise `step_aux`. Data-less arrays (the meta backend) have no values to step: nothing runs."""
    if getattr(w, "is_meta", False):
        return
    for spec in specs:
        window = slice(spec.offset, spec.offset + spec.size)
        if not optimizer.is_matrix(spec.name, spec.shape):
            optimizer.step_aux(w[window], g[window], {k: v[window] for k, v in state.items()}, t)
            continue
        shape = matrix_shape(spec.shape)
        views = {k: state[k][window].reshape(shape) for k in optimizer.matrix_state_names}
        optimizer.step_matrix(w[window].reshape(shape), g[window].reshape(shape), views, t)
