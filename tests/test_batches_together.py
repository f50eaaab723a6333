"""A step's micro-batches checked as one stack (parallel/data/_batches.py `_checked_together`) decide as the check rank
by rank does: every batch that passes one passes the other, and a batch with a problem on any rank is checked rank by
rank, so the error names the same ranks and problems. The yardstick: the same `micro_batches` with the stacked check
turned off (each rank's `Model.check_batch`, the general path)."""

import numpy as np
import pytest

import zerosim.parallel.data._batches as batches_module
from zerosim import MLP, Cluster
from zerosim.models import HalfMSE
from zerosim.parallel.data._batches import micro_batches

N, B, WIDTHS = 4, 3, [5, 4, 2]


def _good():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((B, WIDTHS[0])).astype(np.float32),
             rng.standard_normal((B, WIDTHS[-1])).astype(np.float32)) for _ in range(N)]


def _bad_cases():
    def with_(rank, x=None, t=None):
        made = _good()
        made[rank] = (made[rank][0] if x is None else x, made[rank][1] if t is None else t)
        return made

    nan_x, inf_t = _good()[1][0].copy(), _good()[2][1].copy()
    nan_x[1, 2], inf_t[0, 1] = np.nan, -np.inf
    return {
        "NaN in rank 1's input": with_(1, x=nan_x),
        "inf in rank 2's target": with_(2, t=inf_t),
        "rank 3's target one output short": with_(3, t=np.zeros((B, WIDTHS[-1] - 1), np.float32)),
        "rank 0's input too wide": with_(0, x=np.zeros((B, WIDTHS[0] + 1), np.float32)),
        "rank 2's target of strings": with_(2, t=np.full((B, WIDTHS[-1]), "a")),
        "every rank empty": [(np.zeros((0, WIDTHS[0]), np.float32), np.zeros((0, WIDTHS[-1]), np.float32))] * N,
    }


def _answer(batches, together: bool, monkeypatch):
    """micro_batches' answer, with the stacked check as it is or turned off (every rank checked alone)."""
    if not together:
        monkeypatch.setattr(batches_module, "_checked_together", lambda *a: False)
    try:
        return ("ok", micro_batches(MLP(WIDTHS), Cluster(N), batches, 1))
    except ValueError as e:
        return ("error", str(e))
    finally:
        monkeypatch.undo()


@pytest.mark.bad_input("engine steps")
@pytest.mark.parametrize("case", list(_bad_cases()))
def test_a_problem_on_any_rank_is_named_as_the_rank_by_rank_check_names_it(case, monkeypatch):
    batches = _bad_cases()[case]
    assert not batches_module._checked_together(MLP(WIDTHS), batches, 1)
    alone = _answer(batches, False, monkeypatch)
    assert alone[0] == "error" and alone == _answer(batches, True, monkeypatch)


def test_good_batches_are_checked_once_as_a_stack_and_come_back_as_each_rank_s_list(monkeypatch):
    batches, model, seen = _good(), MLP(WIDTHS), []
    real = HalfMSE.check_target
    monkeypatch.setattr(HalfMSE, "check_target", lambda self, t, b, o: seen.append(t.shape) or real(self, t, b, o))
    # a patched check_target is no longer the one declared row by row: checked rank by rank
    assert micro_batches(model, Cluster(N), batches, 1) == [[b] for b in batches]
    assert seen == [(B, WIDTHS[-1])] * N
    monkeypatch.undo()
    assert batches_module._checked_together(model, batches, 1)  # the declared one: the stack, once
    stacked, alone = _answer(batches, True, monkeypatch), _answer(batches, False, monkeypatch)
    assert stacked[0] == "ok" and all(a[0] is b[0] and a[0][0] is b[0][0] for a, b in zip(stacked[1], alone[1]))


def test_a_loss_that_checks_targets_otherwise_is_asked_rank_by_rank():
    class Whole(HalfMSE):  # declares nothing about its check: HalfMSE's vouches for HalfMSE's alone
        def check_target(self, target, batch, outputs):
            super().check_target(target, batch, outputs)

    model = MLP(WIDTHS)
    model.loss = Whole()
    assert not model.loss.checks_rows()
    assert not batches_module._checked_together(model, _good(), 1)
