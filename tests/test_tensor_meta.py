"""The data-less twin of a TP rank's model (zerosim/parallel/tensor/_meta.py) is the real one without values: the same
buffers born and freed in the same order, the same bytes on the wire; and it accounts Llama 3.1 405B beside TP 8 on
2,048 ranks (the model states against the hand formula)."""

import numpy as np
import pytest
from helpers import tp_model_state_bytes

from zerosim import Cluster, ZeroEngine, get_optimizer
from zerosim.analysis.costs import measure_stage
from zerosim.models import GPT, Llama, MetaGPT, MetaLlama
from zerosim.parallel.tensor import TensorParallel


def run(model, backend, sp, stage):
    tp = TensorParallel(model, tp=2, sequence_parallel=sp)
    cluster = Cluster(4, gpus_per_node=2, backend=backend, trace="call")
    for r in cluster.ranks:
        r.ledger.keep_timeline = True
    engine = ZeroEngine(tp.model, cluster, stage, get_optimizer("adam"), "bf16-mixed", parallelisms=(tp,))
    if backend == "numpy":
        rng = np.random.default_rng(0)
        engine.step(tp.batches(engine.dims, [(rng.integers(0, 16, (2, 8)),) * 2 for _ in range(2)]))
    else:
        engine.step(tp.model.batches(cluster, 2, 8))
    ledger = cluster.ranks[0].ledger
    return [(e.action, e.name, e.nbytes) for e in ledger.timeline], cluster.trace.sent_totals(4)


@pytest.mark.parametrize("stage", [1, 3])
@pytest.mark.parametrize("sp", [False, True], ids=["TP", "TP+SP"])
@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_the_twin_holds_and_sends_what_the_real_model_does(family, sp, stage):
    if family == "gpt":
        real = GPT(vocab=16, d_model=8, n_heads=2, n_layers=2, seq_len=8, checkpoint="block")
        twin = MetaGPT(real)
    else:
        real = Llama(vocab=16, d_model=8, n_heads=4, n_kv_heads=2, n_layers=2, seq_len=8, d_ff=16)
        twin = MetaLlama(real)
    assert run(real, "numpy", sp, stage) == run(twin, "meta", sp, stage)


LLAMA_405B = {"model_type": "llama", "hidden_size": 16384, "intermediate_size": 53248, "num_attention_heads": 128,
              "num_hidden_layers": 126, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": 8192, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
              "tie_word_embeddings": False}  # meta-llama/Llama-3.1-405B's config.json (positions cut to 8,192)


def test_llama_405b_beside_tp_8_on_2048_ranks(tmp_path):
    import json

    from zerosim.models import read_hf_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA_405B))
    model = MetaLlama.from_config(read_hf_config(str(path)), seq_len=8192, checkpoint="block", attention="flash")
    assert model.num_params == 405_853_388_800
    row, _, engine = measure_stage(model, 2048, 3, "adam", "bf16-mixed", micro_batch=(1, 8192), gpus_per_node=8,
                                   tp=8, sp=True)
    hand = tp_model_state_bytes(engine.model.num_params, 256, 3)
    assert row["resting"] == {"params": hand["params"], "grads": hand["grads"], "master": hand["master"],
                              "optim:m": hand["optim"] // 2, "optim:v": hand["optim"] // 2}
