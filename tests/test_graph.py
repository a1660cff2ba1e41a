"""The operator graph IR: SOAP dims (paper Table 2), regions, FLOPs, builder errors."""

import math

import pytest

from flextui.errors import GraphError
from flextui.graph import DimKind, GraphBuilder, full_region, graph_from_dict

S, A, P = DimKind.SAMPLE, DimKind.ATTRIBUTE, DimKind.PARAMETER


def kinds(op):
    return {d.name: d.kind for d in op.space}


def small_cnn():
    g = GraphBuilder("t", batch_size=8, family="cnn")
    x = g.input((8, 3, 32, 32), name="x")
    c = g.conv2d(x, 16, kernel=3, padding=1, name="conv")
    p = g.pool2d(g.relu(c, name="relu"), 2, name="pool")
    f = g.linear(g.flatten(p, name="flat"), 10, name="fc")
    g.softmax_ce(f, g.input((8,), dtype="int64", name="y"), name="loss")
    return g.build()


def test_table2_dims():
    graph = small_cnn()
    assert kinds(graph.op("conv")) == {"sample": S, "channel": P, "height": A, "width": A}
    assert kinds(graph.op("pool")) == {"sample": S, "channel": A, "height": A, "width": A}
    assert kinds(graph.op("fc")) == {"sample": S, "channel": P}
    assert kinds(graph.op("loss")) == {"sample": S, "channel": None}
    assert kinds(graph.op("flat")) == {"sample": S, "d1": None}


def test_conv_halo_regions():
    g = GraphBuilder("t")
    x = g.input((4, 3, 32, 32))
    conv = g.add("conv2d", [x], {"out_channels": 8, "kernel": 3, "stride": 1, "padding": 1,
                                 "dilation": 1, "bias": False})
    inner = ((0, 2), (0, 8), (8, 16), (0, 32))
    assert conv.input_regions(inner) == [((0, 2), (0, 3), (7, 17), (0, 32))]
    edge = ((2, 4), (0, 8), (0, 8), (24, 32))
    assert conv.input_regions(edge) == [((2, 4), (0, 3), (0, 9), (23, 32))]
    # a block of out-channels needs the matching rows of the weight, all input channels
    assert conv.param_region(0, ((0, 4), (4, 8), (0, 32), (0, 32))) == ((4, 8), (0, 3), (0, 3), (0, 3))


def test_strided_conv_output_and_halo():
    g = GraphBuilder("t")
    x = g.input((1, 3, 224, 224))
    y = g.conv2d(x, 64, kernel=11, stride=4, padding=2)
    assert y.shape == (1, 64, 55, 55)
    op = y.producer
    # output rows [0, 28) read input rows 0*4-2 .. 27*4-2+11 = [0, 117)
    assert op.input_regions(((0, 1), (0, 64), (0, 28), (0, 55)))[0][2] == (0, 117)


def test_adaptive_pool_bins_follow_torch():
    torch = pytest.importorskip("torch")
    g = GraphBuilder("t")
    x = g.input((1, 1, 13, 13))
    op = g.adaptive_pool2d(x, 6).producer
    src = torch.arange(13.0).reshape(1, 1, 13, 1).expand(1, 1, 13, 13)
    for i in range(6):
        rows = op.input_regions(((0, 1), (0, 1), (i, i + 1), (0, 6)))[0][2]
        expected = torch.nn.functional.adaptive_max_pool2d(src, (6, 6))[0, 0, i, 0].item()
        assert rows[1] - 1 == expected  # the last row of bin i is the max of the bin


def test_linear_flops_and_param_split():
    g = GraphBuilder("t")
    y = g.linear(g.input((32, 512)), 1024)
    op = y.producer
    assert op.flops(full_region((32, 1024))) == (2 * 32 * 512 * 1024, 2 * 2 * 32 * 512 * 1024)
    assert op.param_region(0, ((0, 32), (256, 512))) == ((256, 512), (0, 512))
    assert op.param_region(1, ((0, 32), (256, 512))) == ((256, 512),)
    assert op.param_count == 1024 * 512 + 1024


def test_lstm_cells_share_one_parameter_and_split_by_gate():
    g = GraphBuilder("t")
    state = None
    for t in range(3):
        x = g.input((16, 32), name=f"x{t}")
        state = g.lstm_cell(x, state, 64, shared="lstm0")
    graph = g.build()
    cells = [op for op in graph.ops if op.type == "lstm_cell"]
    assert all(c.params[0] is cells[0].params[0] for c in cells)
    assert graph.param_count == 4 * 64 * (32 + 64) + 8 * 64  # torch.nn.LSTMCell's count
    assert {c.layer for c in cells} == {"lstm0"}
    assert cells[1].param_region(0, ((0, 16), (16, 32))) == ((0, 4), (16, 32), (0, 32))
    # the recurrent input is read whole; the cell state only for the block's units
    assert cells[1].input_regions(((0, 8), (16, 32))) == [((0, 8), (0, 32)), ((0, 8), (0, 64)),
                                                           ((0, 8), (16, 32))]


def test_split_concat_and_stack_regions():
    g = GraphBuilder("t")
    x = g.input((4, 6, 10))
    a, b = g.split(x, [2, 4], axis=1)
    assert (a.shape, b.shape) == ((4, 2, 10), (4, 4, 10))
    split = a.producer
    assert split.output_regions(((0, 2), (0, 6), (5, 10))) == [((0, 2), (0, 2), (5, 10)),
                                                               ((0, 2), (0, 4), (5, 10))]
    cat = g.concat([a, b], axis=1).producer
    assert cat.outputs[0].shape == (4, 6, 10) and cat.space[1].kind is None
    assert cat.input_regions(((0, 2), (0, 6), (0, 5))) == [((0, 2), (0, 2), (0, 5)),
                                                           ((0, 2), (0, 4), (0, 5))]
    st = g.stack([g.input((4, 10)), g.input((4, 10))], axis=1).producer
    assert st.outputs[0].shape == (4, 2, 10)
    assert st.input_regions(((0, 4), (0, 2), (2, 4))) == [((0, 4), (2, 4))] * 2


def test_multihead_attention_splits_on_heads():
    g = GraphBuilder("t")
    q = g.input((2, 16, 64))
    op = g.multihead_attention(q, q, q, heads=4).producer
    assert op.space[2].valid_degrees() == (1, 2, 4)
    assert op.input_regions(((0, 2), (0, 8), (16, 32)))[1] == ((0, 2), (0, 16), (16, 32))


@pytest.mark.parametrize("build, message", [
    (lambda g: g.conv2d(g.input((1, 3, 4, 4)), 8, kernel=7), "kernel 7x7 larger"),
    (lambda g: g.conv2d(g.input((1, 3, 8, 8)), 8, kernel=1, padding=2), "read padding only"),
    (lambda g: g.pool2d(g.input((1, 3, 8, 8)), kernel=3, padding=2), "more than half"),
    (lambda g: g.add_(g.input((2, 3)), g.input((2, 4))), "do not broadcast"),
    (lambda g: g.matmul(g.input((2, 3)), g.input((4, 5))), "do not multiply"),
    (lambda g: g.softmax_ce(g.input((2, 5)), g.input((2,))), "labels must be integers"),
    (lambda g: g.reshape(g.input((2, 6)), [3, 4]), "must keep the batch dim"),
    (lambda g: g.add("nonsense", [], {}), "unknown op type 'nonsense'"),
    (lambda g: [g.input((2,), name="a"), g.input((2,), name="a")], "used twice"),
    (lambda g: [g.linear(g.input((2, 3)), 4, shared="w"), g.linear(g.input((2, 5)), 4, shared="w")],
     "shares 'w'"),
])
def test_builder_rejects_bad_graphs(build, message):
    with pytest.raises(GraphError, match=message):
        build(GraphBuilder("bad"))


def test_round_trip_through_plain_data_keeps_sharing():
    g = GraphBuilder("rt", batch_size=4, family="rnn")
    state = None
    for t in range(2):
        state = g.lstm_cell(g.input((4, 8), name=f"x{t}"), state, 8, shared="l0")
    graph = g.build()
    again = graph_from_dict(graph.to_dict())
    assert again.fingerprint == graph.fingerprint
    assert [op.name for op in again.ops] == [op.name for op in graph.ops]
    cells = [op for op in again.ops if op.type == "lstm_cell"]
    assert cells[0].params[0] is cells[1].params[0]
    assert again.param_count == graph.param_count


def test_malformed_graph_data_is_a_clear_error():
    with pytest.raises(GraphError, match="malformed"):
        graph_from_dict({"name": "x", "ops": [{"name": "a", "type": "relu"}]})


def _lenet_data(edit) -> dict:
    from flextui.graph.library import load_model
    data = load_model("lenet").to_dict()
    data["ops"] = [dict(op, attrs=dict(op["attrs"])) for op in data["ops"]]
    data["meta"] = dict(data["meta"])
    edit(data, {op["name"]: op for op in data["ops"]})
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda d, ops: ops["fc3"]["attrs"].update(out_features=float("inf")),
     r"'fc3' \(linear\): output shape .* is not whole numbers"),
    (lambda d, ops: ops["fc3"]["attrs"].update(out_features=2**50),
     "fc3.*1,125,899,906,842,624 elements along one tensor dim .* limit of 1,099,511,627,776"),
    (lambda d, ops: ops["conv1"]["attrs"].update(kernel="5"), "'conv1' .* do not fit"),
    (lambda d, ops: ops["images"]["attrs"].update(dtype="float64"), "unknown dtype 'float64'"),
    (lambda d, ops: d.update(dtype=" "), "unknown dtype ' '"),
    (lambda d, ops: d["meta"].update(family={"cnn": 1}), "meta family must be a string"),
    (lambda d, ops: d["meta"].update(batch_size="64"), "meta batch_size"),
    (lambda d, ops: ops["unary_1"]["attrs"].update(fn="x" * 100_000),
     r"unknown function 'xxx.*\.\.\.$"),
    (lambda d, ops: ops["unary_1"].update(type="x" * 100_000), "unknown op type 'xxx"),
])
def test_graph_data_with_attributes_of_the_wrong_kind_is_a_graph_error(edit, message):
    """A search log's graph, edited by hand: every bad attribute is a GraphError when the
    graph is rebuilt, never a TypeError or a hang when it is simulated."""
    with pytest.raises(GraphError, match=message) as info:
        graph_from_dict(_lenet_data(edit))
    assert len(str(info.value)) < 500


def test_topological_order_and_networkx_view():
    graph = small_cnn()
    nxg = graph.to_networkx()
    assert list(nxg.successors("conv")) == ["relu"]
    index = {op.name: op.index for op in graph.ops}
    assert all(index[a] < index[b] for a, b in nxg.edges)
    fwd, bwd = graph.total_flops()
    conv_flops = 2 * 8 * 16 * 32 * 32 * 3 * 9
    assert fwd >= conv_flops and math.isclose(graph.op("conv").flops(
        full_region(graph.op("conv").space_shape))[0], conv_flops)


def test_sharing_key_equal_to_an_op_name_survives_round_trip():
    g = GraphBuilder("rt", dtype="float16")
    ids = [g.input((4,), dtype="int64", name=f"ids{t}") for t in range(2)]
    g.embedding(ids[0], 10, 8, name="embed", shared="embed")
    g.embedding(ids[1], 10, 8, name="embed2", shared="embed")
    again = graph_from_dict(g.build().to_dict())
    a, b = again.op("embed"), again.op("embed2")
    assert a.params[0] is b.params[0] and a.params[0].dtype == "float16"


def test_parameter_names_never_collide_silently():
    g = GraphBuilder("c")
    g.embedding(g.input((4,), dtype="int64"), 10, 8, name="embed")
    with pytest.raises(GraphError, match="already used"):
        g.embedding(g.input((4,), dtype="int64"), 10, 8, name="e2", shared="embed")
