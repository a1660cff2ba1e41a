"""The built-in model library: every model builds, its graph is well formed, and the
parameter counts match published or closed-form numbers."""

from __future__ import annotations

import pytest

from flextui.errors import ModelError
from flextui.graph import graph_from_dict
from flextui.graph.library import load_model, model_info, model_names

FAMILIES = {"cnn", "rnn", "transformer", "recommendation", "mlp"}
EXPECTED_MODELS = {"alexnet", "dlrm", "inception_v3", "lenet", "mlp", "nmt", "resnet101",
                   "rnnlm", "rnnlm2", "rnntc", "transformer"}


def lstm_params(inp: int, hidden: int) -> int:
    """torch.nn.LSTMCell: W_ih [4H, In], W_hh [4H, H] and two biases [4H]."""
    return 4 * hidden * (inp + hidden) + 8 * hidden


def linear_params(inp: int, out: int, bias: bool = True) -> int:
    return inp * out + (out if bias else 0)


def ops_of(graph, type_: str, layer: str | None = None):
    return [op for op in graph.ops if op.type == type_ and (layer is None or op.layer == layer)]


def assert_shared(ops) -> None:
    """Every op uses the very same Parameter objects as the first."""
    assert len(ops) > 1
    first = ops[0].params
    assert first
    for op in ops[1:]:
        assert len(op.params) == len(first)
        assert all(p is q for p, q in zip(op.params, first)), op.name


# -- every model -------------------------------------------------------------------------


def test_library_lists_the_models():
    assert set(model_names()) >= EXPECTED_MODELS
    assert not any(name.startswith("_") for name in model_names())


@pytest.mark.parametrize("name", model_names())
def test_model_builds_well_formed(name):
    info = model_info(name)
    assert info.description and "\n" not in info.description
    assert "batch_size" in info.defaults

    graph = load_model(name)
    assert len(graph) > 0
    assert graph.family in FAMILIES
    assert graph.batch_size == info.defaults["batch_size"]
    assert len({op.name for op in graph.ops}) == len(graph.ops)
    for i, op in enumerate(graph.ops):
        assert op.index == i
        for t in op.outputs:
            assert t.shape and all(s > 0 for s in t.shape), (op.name, t.shape)
        for t in op.inputs:
            assert t.producer.index < op.index, (t.producer.name, op.name)
    # a training graph: ends in a loss against integer labels of the batch
    assert graph.ops[-1].type == "softmax_ce"
    for loss in ops_of(graph, "softmax_ce"):
        labels = loss.inputs[1]
        assert labels.producer.type == "input" and labels.dtype == "int64"
        assert labels.shape[0] == graph.batch_size
    assert graph.param_count > 0

    rebuilt = graph_from_dict(graph.to_dict())
    assert rebuilt.fingerprint == graph.fingerprint
    assert rebuilt.param_count == graph.param_count


def test_options_reach_the_graph():
    graph = load_model("alexnet", batch_size=32)
    assert graph.ops[0].outputs[0].shape[0] == 32
    assert graph.batch_size == 32

    graph = load_model("rnnlm", steps="3")  # strings (from the command line) convert
    assert graph.meta["options"]["steps"] == 3
    assert len(ops_of(graph, "softmax_ce")) == 3
    assert len(ops_of(graph, "lstm_cell", "lstm0")) == 3


def test_bad_options_are_model_errors():
    with pytest.raises(ModelError):
        load_model("resnet101", depth=34)
    with pytest.raises(ModelError):
        load_model("dlrm", interaction="bilinear")
    with pytest.raises(ModelError):
        load_model("rnnlm", steps="many")


@pytest.mark.parametrize("name, option, value, allowed", [
    ("rnnlm", "layers", "0", "1 to 64"), ("rnntc", "layers", "-2", "1 to 64"),
    ("nmt", "layers", "0", "1 to 64"), ("nmt", "steps", "0", "1 to 1,000"),
    ("transformer", "heads", "0", "1 to 1,024"), ("mlp", "width", "0", "1 to 1,048,576"),
    ("lenet", "batch_size", "0", "1 to 1,048,576"),
    pytest.param("rnnlm", "steps", "9" * 5000, "1 to 1,000", id="rnnlm-steps-5000-digits"),
])
def test_an_option_out_of_its_range_names_the_option_and_range(name, option, value, allowed):
    with pytest.raises(ModelError) as info:
        load_model(name, **{option: value})
    message = str(info.value)
    assert f"option {option}" in message and allowed in message and len(message) < 200


@pytest.mark.parametrize("name, options", [
    ("dlrm", {"interaction": "x" * 100_000}), ("lenet", {"y" * 100_000: "1"}),
    ("n" * 100_000, {})], ids=["value", "option", "model"])
def test_a_huge_option_or_name_is_cut_in_the_message(name, options):
    with pytest.raises(ModelError) as info:
        load_model(name, **options)
    assert len(str(info.value)) < 1000


def test_every_whole_number_option_of_the_library_has_a_range():
    for name in model_names():
        info = model_info(name)
        whole = {k for k, v in info.defaults.items() if type(v) is int}
        assert whole <= set(info.ranges), (name, whole - set(info.ranges))
        for option, (least, most) in info.ranges.items():
            assert least <= info.defaults[option] <= most, (name, option)


# -- CNNs: torchvision's published parameter counts ----------------------------------------


def test_alexnet_matches_torchvision():
    # torchvision.models.alexnet(): 61,100,840 parameters
    graph = load_model("alexnet")
    assert graph.param_count == 61_100_840
    assert graph.op("flatten").outputs[0].shape == (256, 9216)
    assert len(ops_of(graph, "conv2d")) == 5 and len(ops_of(graph, "linear")) == 3


@pytest.mark.parametrize("depth,count", [(50, 25_557_032), (101, 44_549_160),
                                         (152, 60_192_808)])
def test_resnet_matches_torchvision(depth, count):
    # torchvision.models.resnet50/101/152(): 25,557,032 / 44,549,160 / 60,192,808
    graph = load_model("resnet101", depth=depth)
    assert graph.param_count == count
    convs = [op for op in ops_of(graph, "conv2d") if "downsample" not in op.name]
    assert len(convs) + 1 == depth  # the depth counts the main-path convs and the fc
    assert len(ops_of(graph, "conv2d")) - len(convs) == 4  # one shortcut conv per stage
    assert graph.op("flatten").outputs[0].shape == (64, 2048)


def test_inception_v3_matches_torchvision():
    # torchvision.models.inception_v3(aux_logits=True, init_weights=False): 27,161,264
    graph = load_model("inception_v3")
    assert graph.param_count == 27_161_264
    assert graph.op("Mixed_6e.concat").outputs[0].shape == (64, 768, 17, 17)
    assert graph.op("Mixed_7c.concat").outputs[0].shape == (64, 2048, 8, 8)
    assert len(ops_of(graph, "softmax_ce")) == 2  # main and auxiliary losses
    assert graph.op("AuxLogits.loss").inputs[1] is graph.op("loss").inputs[1]

    # Without AuxLogits: minus its conv0 (768->128, 1x1, + BN), conv1 (128->768, 5x5,
    # + BN) and fc (768->1000).
    aux = (768 * 128 + 2 * 128) + (128 * 768 * 25 + 2 * 768) + linear_params(768, 1000)
    assert aux == 3_326_696
    graph = load_model("inception_v3", aux_logits=False)
    assert graph.param_count == 27_161_264 - aux == 23_834_568
    assert not any(op.name.startswith("AuxLogits") for op in graph.ops)


def test_inception_asymmetric_kernels_keep_the_size():
    graph = load_model("inception_v3", batch_size=2)
    for name in ("Mixed_6b.branch7x7_2.conv", "Mixed_6b.branch7x7dbl_2.conv",
                 "Mixed_7b.branch3x3_2a.conv", "Mixed_7b.branch3x3_2b.conv"):
        op = graph.op(name)
        assert op.inputs[0].shape[2:] == op.outputs[0].shape[2:], name


# -- RNNs: shared parameters and closed-form counts ---------------------------------------


def test_rnnlm_shares_and_counts():
    opts = model_info("rnnlm").defaults
    graph = load_model("rnnlm")
    steps, layers, hidden, vocab = opts["steps"], opts["layers"], opts["hidden"], opts["vocab"]
    for layer in range(layers):
        cells = ops_of(graph, "lstm_cell", f"lstm{layer}")
        assert len(cells) == steps
        assert_shared(cells)
    assert_shared(ops_of(graph, "embedding"))
    assert_shared(ops_of(graph, "linear"))
    assert len(ops_of(graph, "softmax_ce")) == steps
    expected = (vocab * hidden + layers * lstm_params(hidden, hidden)
                + linear_params(hidden, vocab))
    assert graph.param_count == expected == 108_111_632


def test_rnnlm2_is_the_two_step_variant():
    graph = load_model("rnnlm2")
    assert len(ops_of(graph, "lstm_cell")) == 2 * 2
    assert len(ops_of(graph, "softmax_ce")) == 2
    o = model_info("rnnlm2").defaults
    h, v = o["hidden"], o["vocab"]
    assert graph.param_count == v * h + 2 * lstm_params(h, h) + linear_params(h, v)


def test_rnntc_shares_and_counts():
    o = model_info("rnntc").defaults
    graph = load_model("rnntc")
    for layer in range(o["layers"]):
        assert_shared(ops_of(graph, "lstm_cell", f"lstm{layer}"))
    assert_shared(ops_of(graph, "embedding"))
    assert len(ops_of(graph, "embedding")) == o["steps"]
    (loss,) = ops_of(graph, "softmax_ce")
    assert loss.inputs[0].shape == (o["batch_size"], o["num_classes"])
    h, e = o["hidden"], o["embed_dim"]
    expected = (o["vocab"] * e + lstm_params(e, h) + (o["layers"] - 1) * lstm_params(h, h)
                + linear_params(h, o["num_classes"]))
    assert graph.param_count == expected


def test_nmt_shares_and_counts():
    o = model_info("nmt").defaults
    graph = load_model("nmt")
    steps, layers, h, v = o["steps"], o["layers"], o["hidden"], o["vocab"]
    for side in ("encoder", "decoder"):
        for layer in range(layers):
            cells = ops_of(graph, "lstm_cell", f"{side}.lstm{layer}")
            assert len(cells) == steps
            assert_shared(cells)
        assert_shared(ops_of(graph, "embedding", f"{side}.embed"))
    enc = ops_of(graph, "lstm_cell", "encoder.lstm0")
    assert enc[0].params[0] is not ops_of(graph, "lstm_cell", "decoder.lstm0")[0].params[0]
    # decoder layer l starts from encoder layer l's final (h, c)
    for layer in range(layers):
        last = ops_of(graph, "lstm_cell", f"encoder.lstm{layer}")[-1]
        first = ops_of(graph, "lstm_cell", f"decoder.lstm{layer}")[0]
        assert first.inputs[1:] == last.outputs
    attention = ops_of(graph, "attention")
    assert len(attention) == steps
    assert_shared(attention)
    assert attention[0].inputs[1].shape == (o["batch_size"], steps, h)
    assert_shared(ops_of(graph, "linear"))
    assert len(ops_of(graph, "softmax_ce")) == steps
    attention_params = 2 * h * h + h + 2 * h * h  # W_query, W_keys, v, W_out [H, 2H]
    expected = (2 * v * h + 2 * layers * lstm_params(h, h) + attention_params
                + linear_params(h, v))
    assert graph.param_count == expected


# -- the rest --------------------------------------------------------------------------------


def transformer_params(layers, width, seq_len, vocab, **_) -> int:
    """Token and position tables, per block 2 layernorms + qkv + proj + 2 MLP linears,
    final layernorm, untied bias-free head."""
    d = width
    block = 2 * 2 * d + linear_params(d, 3 * d) + linear_params(d, d) \
        + linear_params(d, 4 * d) + linear_params(4 * d, d)
    return vocab * d + seq_len * d + layers * block + 2 * d + d * vocab


def test_transformer_counts():
    o = model_info("transformer").defaults
    graph = load_model("transformer")
    assert graph.param_count == transformer_params(**o) == 163_037_184
    # GPT-2 small ties the head to the token table: 124,439,808 (the published number)
    assert graph.param_count - o["vocab"] * o["width"] == 124_439_808
    assert len(ops_of(graph, "multihead_attention")) == o["layers"]
    small = load_model("transformer", layers=2, width=64, heads=4, seq_len=16, vocab=100)
    assert small.param_count == transformer_params(2, 64, 16, 100)
    assert small.ops[-1].inputs[0].shape == (8, 16, 100)


def test_dlrm_counts():
    o = model_info("dlrm").defaults
    t, d = o["num_tables"], o["embed_dim"]
    bottom = linear_params(13, 512) + linear_params(512, 256) + linear_params(256, d)
    tables = t * o["rows_per_table"] * d

    def top(inp):
        return linear_params(inp, 512) + linear_params(512, 256) + linear_params(256, 2)

    graph = load_model("dlrm")
    assert graph.param_count == bottom + tables + top((t + 1) * d)
    assert len(ops_of(graph, "embedding")) == t
    graph = load_model("dlrm", interaction="dot", batch_size=16)
    assert graph.param_count == bottom + tables + top(d + (t + 1) ** 2)
    assert graph.op("interaction.dot").outputs[0].shape == (16, t + 1, t + 1)


def test_mlp_counts():
    o = model_info("mlp").defaults
    w = o["width"]
    expected = (linear_params(o["in_features"], w) + (o["layers"] - 1) * linear_params(w, w)
                + linear_params(w, o["num_classes"]))
    assert load_model("mlp").param_count == expected
    assert len(ops_of(load_model("mlp", layers=1), "linear")) == 2


def test_lenet_count():
    # conv 1->6 5x5, conv 6->16 5x5, fc 400-120-84-10
    expected = (6 * 25 + 6) + (16 * 6 * 25 + 16) + linear_params(400, 120) \
        + linear_params(120, 84) + linear_params(84, 10)
    assert load_model("lenet").param_count == expected == 61_706


# -- parallelizable dims follow the FlexFlow paper's Table 2, in every model --------

TABLE2 = {  # op type -> the kinds of its partition dims, in order (None: not parallel)
    "conv2d": ("sample", "parameter", "attribute", "attribute"),
    "pool2d": ("sample", "attribute", "attribute", "attribute"),
    "lstm_cell": ("sample", "parameter"),
    "attention": ("sample", "parameter"),
    "multihead_attention": ("sample", "attribute", "attribute"),
}


@pytest.mark.parametrize("name", model_names())
def test_every_op_follows_table2(name):
    for op in load_model(name).ops:
        kinds = tuple(d.kind.value if d.kind else None for d in op.space)
        assert kinds[0] == "sample", f"{op.name}: every op has a sample dim first"
        if op.type in TABLE2:
            assert kinds == TABLE2[op.type], op.name
        if op.type in ("linear", "embedding"):  # matrix multiplication: out-channel parameter
            assert kinds[-1] == "parameter" and set(kinds[1:-1]) <= {"attribute"}, op.name
        if op.type in ("softmax_ce", "layernorm"):  # the normalised dim cannot be split
            assert kinds[-1] is None, op.name
        if op.type == "batchnorm":
            assert kinds[:2] == ("sample", "parameter"), op.name


def test_a_model_path_that_is_not_a_python_file_is_one_message(tmp_path):
    data = tmp_path / "model.txt"
    data.write_text("not python")
    with pytest.raises(ModelError, match="is not a Python file"):
        load_model(str(data))
