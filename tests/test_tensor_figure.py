"""The mesh figure with a TP axis (zerosim/viz/_tensor_mesh.py) draws what the engine's groups and trace say: the TP
groups inside a node, the data-parallel groups across nodes, and each GPU's bytes by purpose and link."""

import matplotlib

matplotlib.use("Agg")

from helpers import by_gid  # noqa: E402

from zerosim.viz import measure_tensor_mesh, tensor_mesh_figure  # noqa: E402


def test_tp_lives_inside_a_node_and_zero_across():
    m = measure_tensor_mesh()  # tp 2 x dp 4 on 4 nodes of 2
    node = lambda r: r // m["gpus_per_node"]  # noqa: E731
    assert all(len({node(r) for r in g}) == 1 for g in m["tp_groups"])  # a TP group: one node
    assert all(len({node(r) for r in g}) == len(g) for g in m["dp_groups"])  # a dp group: one GPU a node
    for sent in m["sent"]:
        assert sent[("tensor parallel", "inter-node")] == 0 and sent[("tensor parallel", "intra-node")] > 0
        assert sent[("ZeRO", "intra-node")] == 0 and sent[("ZeRO", "inter-node")] > 0


def test_the_figure_draws_the_measured_bytes():
    m = measure_tensor_mesh()
    fig = tensor_mesh_figure()
    mesh, bars = fig.axes
    assert len(by_gid(mesh, "tp group")) == len(m["tp_groups"]) and len(by_gid(mesh, "dp group")) == 2
    tp = sorted(by_gid(bars, "sent:tensor parallel:intra-node"), key=lambda p: p.get_x())
    assert [round(p.get_height() * 1e3) for p in tp] == [s[("tensor parallel", "intra-node")] for s in m["sent"]]
