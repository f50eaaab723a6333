"""The parity lane for pipeline schedules: each zerosim table against what torch itself runs, for the same (stages,
micro-batches, virtual stages), torch built without processes. Skipped without torch (the parity extra:
pip install torch==2.13.0 && pip install -e '.[parity]').

    GPipe, 1F1B          torch's own `_step_microbatches` run on a stage that records what it is told to do (every
                         send and receive a no-op): the order torch runs forwards and backwards in. (Their
                         `pipeline_order`, built for visualisation, numbers the last rank's 1F1B forwards from 1 in
                         torch 2.13; the runtime runs micro-batch 0 first.)
    interleaved, ZB1P    `pipeline_order`, the IR torch's `_PipelineScheduleRuntime` executes, time step by time step
                         (None: an idle step), from `_calculate_single_rank_operations` and `_add_bubbles_to_actions`
"""

import itertools

import pytest

from zerosim.parallel.pipeline import make_table

torch = pytest.importorskip("torch", reason="torch (the parity extra) is not installed: pip install -e '.[parity]'")
schedules = pytest.importorskip("torch.distributed.pipelining.schedules")

pytestmark = pytest.mark.slow


class _Recorder:
    """A pipeline stage for torch's single-stage schedules: records each forward and backward it is asked for."""

    def __init__(self, stage_index: int, num_stages: int):
        self.stage_index, self.num_stages = stage_index, num_stages
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.done, self.output_chunks = [], []

    def get_fwd_recv_ops(self, i):
        return []

    get_fwd_send_ops = get_bwd_recv_ops = get_bwd_send_ops = get_fwd_recv_ops

    def forward_one_chunk(self, i, *args, **kwargs):
        self.done.append(f"{self.stage_index}F{i}")

    def backward_one_chunk(self, i, loss=None, last_backward=False):
        self.done.append(f"{self.stage_index}B{i}")

    def perform_reduce_grad(self, factor):
        pass

    def clear_runtime_states(self):
        pass


class _Stage:
    """A pipeline stage for torch's multi-stage schedules: what their constructors read."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int):
        self.stage_index, self.num_stages, self.group_size, self.group_rank = (stage_index, num_stages, group_size,
                                                                                group_rank)
        self.submod = torch.nn.Linear(1, 1)
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1


def executed(cls, P: int, M: int) -> list:
    """What torch's single-stage schedule runs on each of P ranks, in order."""
    out = []
    for r in range(P):
        stage = _Recorder(r, P)
        run = cls(stage, M)
        run._initialize_stage = lambda *args, **kwargs: None  # shape inference talks to the neighbours: none here
        run._step_microbatches([()] * M, [{}] * M, None, None)
        out.append(stage.done)
    return out


def ordered(cls, P: int, M: int, V: int) -> list:
    """torch's pipeline_order of a multi-stage schedule: each rank's time steps, "" for an idle one."""
    run = cls([_Stage(c * P, P * V, P, 0) for c in range(V)], M)  # rank 0 builds every rank's order
    rows = []
    for r in range(P):
        row = ["" if a is None else str(a) for a in run.pipeline_order[r]]
        while row and not row[-1]:
            row.pop()
        rows.append(row)
    return rows


@pytest.mark.parametrize("name, cls", [("gpipe", "ScheduleGPipe"), ("1f1b", "Schedule1F1B")])
def test_single_stage_schedules_run_in_torchs_order(name, cls):
    ran = 0
    for P, M in itertools.product(range(1, 6), range(1, 11)):
        try:
            want = executed(getattr(schedules, cls), P, M)
        except ValueError as e:  # torch refuses (1F1B with M < P): so does zerosim, with torch's words
            with pytest.raises(ValueError, match="must be greater than or equal to the number of stages"):
                make_table(name, P, M)
            assert "must be greater than or equal to the number of stages" in str(e)
            continue
        assert [[x for x in row if x] for row in make_table(name, P, M).rows()] == want, (P, M)
        ran += 1
    assert ran > 30


@pytest.mark.parametrize("name, cls", [("interleaved-1f1b", "ScheduleInterleaved1F1B"),
                                       ("zero-bubble", "ScheduleInterleavedZeroBubble")])
def test_multi_stage_schedules_are_torchs_pipeline_order_step_by_step(name, cls):
    ran = refused = 0
    for P, M, V in itertools.product(range(1, 5), range(1, 11), range(1, 4)):
        try:
            want = ordered(getattr(schedules, cls), P, M, V)
        except ValueError as e:
            with pytest.raises(ValueError, match="multiple of the number of rounds"):
                make_table(name, P, M, V)
            assert "multiple of the number of rounds" in str(e)
            refused += 1
            continue
        assert make_table(name, P, M, V).rows() == want, (P, M, V)
        ran += 1
    assert ran > 80 and refused > 3
