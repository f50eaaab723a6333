"""Bad input to tensor parallelism is refused with the problem named, before any rank holds anything: where Megatron
refuses (heads, key/value heads or FFN columns that do not split over T; a sequence SP cannot cut), where the
vocabulary needs Megatron's padding, and what does not compose with TP yet (clipping, Muon, ZeRO++'s wires, NCCL's and
gloo's chunk maps, subblock checkpointing)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.models import GPT, MLP, Llama
from zerosim.parallel.data.zeropp import Wire
from zerosim.parallel.tensor import TensorParallel, padded_model, padded_vocab
from zerosim.precision import get_precision


def gpt(**kw):
    return GPT(**{"vocab": 16, "d_model": 8, "n_heads": 2, "n_layers": 1, "seq_len": 8, **kw})


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("make, tp, said", [
    (lambda: gpt(n_heads=2), 4, "n_heads = 2 does not split over tp = 4 ranks (Megatron's divide asserts '2 is not "
                                "divisible by 4')"),
    (lambda: Llama(vocab=16, d_model=8, n_heads=4, n_kv_heads=2, n_layers=1, seq_len=8, d_ff=16), 4,
     "n_kv_heads = 2 does not split over tp = 4"),
    (lambda: Llama(vocab=16, d_model=8, n_heads=4, n_kv_heads=4, n_layers=1, seq_len=8, d_ff=18), 4,
     "d_ff = 18 does not split over tp = 4"),
    (lambda: gpt(vocab=15), 2, "vocab = 15 does not split over tp = 2 ranks (Megatron's divide asserts '15 is not "
                               "divisible by 2'): pad it as Megatron does, e.g. vocab=256"),
    (lambda: gpt(checkpoint="subblock", unit="sublayer"), 2, "checkpoint='subblock' keeps each sub-block's input"),
    (lambda: MLP([4, 8, 2]), 2, "tensor parallelism splits zerosim's GPT and Llama, got MLP"),
    (lambda: gpt(), 0, "tp must be a positive integer"),
    (lambda: gpt(), True, "tp must be a positive integer"),
])
def test_what_megatron_refuses_is_refused(make, tp, said):
    with pytest.raises((ValueError, TypeError), match=None) as e:
        TensorParallel(make(), tp)
    assert said in str(e.value)


def test_a_vocabulary_is_padded_as_megatron_pads_it():
    assert padded_vocab(50257, 1) == 50304 and padded_vocab(50257, 2) == 50432  # Megatron's GPT-2 vocabularies
    assert padded_vocab(128256, 8) == 129024  # Megatron pads Llama 3 to 128·8s; torchtitan does not (128256 % 8 == 0)
    model = padded_model(gpt(vocab=15), 2)  # 15 rows up to a multiple of 128·2
    assert model.vocab == 256 and TensorParallel(model, 2).local.layers[0].vocab == 128


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_sequence_parallelism_needs_the_length_to_split():
    tp = TensorParallel(gpt(), 2, sequence_parallel=True)
    engine = ZeroEngine(tp.model, Cluster(2), 0, get_optimizer("adam"), "fp32", parallelisms=(tp,))
    before = engine.compute_params(0)
    ids = np.zeros((1, 7), np.int64)
    with pytest.raises(ValueError, match="sequence parallelism cuts each sequence's 7 tokens over tp = 2"):
        engine.step([(ids, ids)] * 2)
    assert np.array_equal(engine.compute_params(0), before) and engine.t == 0


@pytest.mark.bad_input("engine arguments")
@pytest.mark.parametrize("options, said", [
    ({"clip_grad": 1.0}, "clip_grad beside tp 2"),
    ({"precision": get_precision("fp16-mixed").with_(allreduce="nccl"), "stage": 0},
     "allreduce='nccl' maps one all-reduce over every rank"),
    ({"wire": Wire(zero_quantized_weights=True), "stage": 3}, "ZeRO++'s quantized gathers"),
    ({"optimizer": "muon", "stage": 1}, "updates whole matrices; beside tp 2"),
    ({"params": "given"}, "params= and a parallelism that gives every rank its own weights"),
])
def test_what_does_not_compose_with_tp_yet_is_refused(options, said):
    tp = TensorParallel(gpt(), 2)
    options = dict(options)
    stage, optimizer = options.pop("stage", 2), options.pop("optimizer", "adam")
    if options.get("params") == "given":
        options["params"] = tp.model.init_params()
    with pytest.raises(ValueError) as e:  # the CLI's one line (cli/main.py), as every bad argument is
        ZeroEngine(tp.model, Cluster(4), stage, get_optimizer(optimizer), options.pop("precision", "bf16-mixed"),
                   parallelisms=(tp,), **options)
    assert said in str(e.value)


@pytest.mark.bad_input("engine arguments")
def test_tp_must_divide_the_ranks():
    tp = TensorParallel(gpt(), 2)
    with pytest.raises(ValueError, match="tensor parallelism of degree 2 does not divide the 3 ranks"):
        ZeroEngine(tp.model, Cluster(3), 1, get_optimizer("adam"), "fp32", parallelisms=(tp,))


@pytest.mark.bad_input("engine arguments")
@settings(max_examples=40)
@given(T=st.integers(1, 8), heads=st.integers(1, 12), kv=st.integers(1, 12), ffn=st.integers(1, 40),
       vocab=st.integers(2, 40))
def test_drawn_counts_split_or_are_refused_by_megatrons_rule(T, heads, kv, ffn, vocab):
    """Any head, key/value head, FFN and vocabulary count: TensorParallel builds exactly when Megatron's `divide`
    would (H, G and F split over T; the vocabulary too, else padded as Megatron pads it), and names the count that
    does not."""
    if heads % kv:
        kv = heads  # grouped-query attention needs G to divide H before TP has a say
    model = Llama(vocab=vocab, d_model=8, n_heads=heads, n_kv_heads=kv, head_dim=2, n_layers=1, seq_len=4, d_ff=ffn)
    bad = [(name, n) for name, n in (("n_heads", heads), ("n_kv_heads", kv), ("d_ff", ffn), ("vocab", vocab))
           if n % T]
    if T == 1:  # no tensor parallelism: the model itself
        assert TensorParallel(model, T).model is model
    elif bad:
        with pytest.raises(ValueError, match=f"{bad[0][0]} = {bad[0][1]} does not split over tp = {T}"):
            TensorParallel(model, T)
        if [name for name, _ in bad] == ["vocab"]:  # Megatron pads what it pads
            assert TensorParallel(padded_model(model, T), T).local.layers[0].vocab * T == padded_vocab(vocab, T)
    else:
        local = TensorParallel(model, T).local
        attn = local.layers[2]  # embed, block0.ln1, block0.attn
        assert (attn.heads, attn.kv_heads) == (heads // T, kv // T)


@pytest.mark.bad_input("engine arguments", unchanged=True)
def test_a_tp_group_computes_one_micro_batch():
    tp = TensorParallel(gpt(), 2)
    engine = ZeroEngine(tp.model, Cluster(2), 1, get_optimizer("adam"), "fp32", parallelisms=(tp,))
    before = engine.full_master()
    a, b = np.zeros((1, 8), np.int64), np.ones((1, 8), np.int64)
    with pytest.raises(ValueError, match="ranks 0 and 1 form a TP group and compute one micro-batch together"):
        engine.step([(a, a), (b, b)])
    assert np.array_equal(engine.full_master(), before) and engine.t == 0
