"""Where a model is cut into pipeline stages (zerosim/parallel/pipeline/_stages.py): torchtitan's even split and
Megatron's, by hand, what each refuses in its own words, the user's cut, the pieces of every model family (and of a
TP rank's model), and each pipeline rank's model: its units, its flat vector cut from the whole model's and joined
back."""

import numpy as np
import pytest

from zerosim.models import GPT, MLP, Llama
from zerosim.parallel.pipeline import StageModel, pieces, split
from zerosim.parallel.tensor import TensorParallel


def gpt(layers: int) -> GPT:
    return GPT(vocab=8, d_model=4, n_heads=1, n_layers=layers, seq_len=4)


@pytest.mark.parametrize("layers, stages, want", [
    # torchtitan (pipeline_parallel.py `_generate_llm_fqn_per_model_part`, b5bcd76): L layers + the embedding (1) +
    # norm and head (1) = E effective layers, E // S a stage, the first E % S stages one more; the first stage's
    # embedding and the last's head count as one layer each
    (126, 16, (7,) + (8,) * 14 + (7,)),  # Llama 3.1 405B on PP 16: E = 128, 8 a stage; the ends 7 layers + 1
    (5, 2, (3, 2)),  # E = 7: 4 and 3 effective; 4 - 1 = 3 layers, 3 - 1 = 2
    (5, 4, (1, 2, 2, 0)),  # E = 7: 2 2 2 1; the last stage is the head alone (7 // 4 = 1 = the output weight)
    (3, 1, (3,)),  # one stage: everything
    (32, 4, (8, 9, 8, 7)),  # E = 34: 9 9 8 8 effective (the extra two first); the ends one layer fewer
])
def test_torchtitans_split_by_hand(layers, stages, want):
    model = gpt(layers)
    assert split(model, stages).layers_per_stage(model) == want


def test_the_named_405b_row():
    # torchtitan's Llama 3.1 405B table (PP 8, and Llama 3's PP 16): 126 layers, 16 stages
    model = gpt(126)
    cut = split(model, 16)
    assert cut.units[0] == (0, 8)  # the embedding and blocks 0..6
    assert cut.units[-1] == (120, 128)  # blocks 119..125 and the head
    assert cut.layers_per_stage(model) == (7,) + (8,) * 14 + (7,)


def test_megatrons_split_and_its_refusals():
    model = gpt(8)
    assert split(model, 2, rule="megatron").layers_per_stage(model) == (4, 4)  # L / P, embedding and head besides
    assert split(model, 2, 2, rule="megatron").layers_per_stage(model) == (2, 2, 2, 2)  # L / P / V
    with pytest.raises(ValueError, match=r"num_layers=5 should be divisible by "
                                         r"config.pipeline_model_parallel_size=2 \(Megatron-Core core_v0.19.0"):
        split(gpt(5), 2, rule="megatron")
    with pytest.raises(ValueError, match="num_layers_per_pipeline_rank 3 should be divisible by vp_size 2"):
        split(gpt(6), 2, 2, rule="megatron")


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("args, words", [
    ((gpt(5), 8), r"Number of stages \(8\) cannot be greater than effective layers \(7\)"),
    ((gpt(2), 4, 1, "torchtitan", (1, 0, 0, 1)), "stage 1 would hold no unit"),  # an empty middle stage
    ((gpt(5), 2, 1, "torchtitan", (2, 2)), "adding up to the model's 5 layers"),
    ((gpt(5), 2, 1, "torchtitan", (2, 2, 1)), "must give 2 non-negative layer counts"),
    ((gpt(5), 2, 1, "even"), "split rule must be one of"),
])
def test_a_split_that_cannot_be_is_refused(args, words):
    with pytest.raises(ValueError, match=words):
        split(*args)


def test_the_user_says_where():
    model = gpt(5)
    assert split(model, 2, layers=(1, 4)).units == ((0, 2), (2, 7))  # the embedding and block 0; the rest
    assert split(model, 2, layers=(0, 5)).units == ((0, 1), (1, 7))  # the embedding alone: Megatron's own choice too


def cut_of(model) -> tuple:
    p = pieces(model)
    return p.first, p.layers, p.last


def test_the_pieces_of_every_family():
    assert cut_of(gpt(2)) == ((0, 1), ((1, 2), (2, 3)), (3, 4))  # embed | block0 | block1 | head
    llama = Llama(vocab=8, d_model=8, n_heads=2, n_layers=2, seq_len=4)
    assert cut_of(llama) == ((0, 1), ((1, 2), (2, 3)), (3, 4))
    sub = GPT(vocab=8, d_model=4, n_heads=1, n_layers=2, seq_len=4, unit="sublayer")  # two units a block
    assert cut_of(sub)[1] == ((1, 3), (3, 5))
    mlp = MLP([3, 4, 4, 2])  # fc0 act0 | fc1 act1 | fc2: no embedding, no head
    assert cut_of(mlp) == (None, ((0, 2), (2, 4), (4, 5)), None)
    tp = TensorParallel(GPT(vocab=8, d_model=8, n_heads=2, n_layers=2, seq_len=4), 2).model
    assert cut_of(tp) == ((0, 2), ((2, 7), (7, 12)), (12, 14))  # embed, embed.add | 5 units a block | lnf, head


def test_a_ranks_model_is_its_chunks_units_and_its_slice_of_the_weights():
    model = gpt(5)
    whole = model.init_params(np.random.default_rng(0))
    cut = split(model, 2, 2)  # 4 stages: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3
    parts = [StageModel(model, cut, r) for r in range(2)]
    assert parts[0].stage_ids == (0, 2) and parts[1].stage_ids == (1, 3)
    assert parts[0].units == tuple(range(*cut.units[0])) + tuple(range(*cut.units[2]))
    assert parts[0].first and not parts[0].last and parts[1].last
    assert sum(p.num_params for p in parts) == model.num_params  # every weight on exactly one rank
    joined = np.full(model.num_params, np.nan, np.float32)
    for p in parts:
        mine = p.cut(whole)
        assert mine.shape == (p.num_params,)
        for i, u in enumerate(p.units):  # each unit's weights, read through the rank's model, are the whole model's
            for name, w in p.unflatten(mine, i).items():
                assert np.array_equal(w, model.unflatten(whole, u)[name])
        p.join(joined, mine)
    assert np.array_equal(joined, whole)
    # the chunks' checkpoint blocks never cross a chunk's edge
    for p in parts:
        for a, b in p.checkpoint_blocks:
            assert any(lo <= a and b <= hi for lo, hi in p.chunks)
