"""A user's PyTorch module through torch.export: ops named after the modules that ran
them, the module's parameter count, a loss added to a module that returns logits, every
unsupported op reported at once with its count and line, and a clear message for a
module torch.export cannot trace or a model file that is not one."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

from flextui.cli import main
from flextui.errors import GraphError, ModelError
from flextui.graph.importer import UnsupportedOps, import_module
from flextui.graph.library import load_model
from helpers import HANG_S


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)

    def forward(self, x):
        return torch.relu(x + self.conv2(torch.relu(self.bn1(self.conv1(x)))))


class ResNetLike(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layer1 = nn.Sequential(Block(8), Block(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = self.layer1(torch.relu(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def test_a_resnet_like_module_maps_op_by_op_with_its_module_paths():
    module = ResNetLike()
    graph = import_module(module, (torch.randn(4, 3, 16, 16),), "resnetlike")
    names = [op.name for op in graph.ops]
    assert names[:5] == ["x", "stem", "relu", "layer1.0.conv1", "layer1.0.bn1"]
    assert "layer1.1.conv2" in names and "layer1.1.add_1" in names
    assert names[-2:] == ["labels", "loss"]              # logits get a cross-entropy loss
    types = [op.type for op in graph.ops]
    assert types.count("conv2d") == 5 and types.count("binary") == 2
    assert types.count("batchnorm") == 2 and types.count("linear") == 1
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    assert graph.batch_size == 4 and graph.op("fc").outputs[0].shape == (4, 10)
    assert not graph.op("layer1.0.conv2").attrs["bias"]


def test_a_module_that_computes_its_loss_keeps_it():
    class WithLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.Dropout(0.1),
                                      nn.Linear(16, 5))

        def forward(self, x, labels):
            return nn.functional.cross_entropy(self.body(x), labels)

    graph = import_module(WithLoss(), (torch.randn(6, 12), torch.randint(0, 5, (6,))), "mlp")
    assert [(op.name, op.type) for op in graph.ops] == [
        ("x", "input"), ("labels", "input"), ("body.0", "linear"), ("body.1", "unary"),
        ("body.2", "unary"), ("body.3", "linear"), ("cross_entropy_loss", "softmax_ce")]
    assert graph.op("body.1").attrs["fn"] == "gelu"


def test_every_unsupported_op_is_reported_once_with_its_count_and_line():
    class Odd(nn.Module):
        def forward(self, x):
            y = torch.cumsum(torch.cumsum(x, 1), 1)
            return torch.sort(y, 1)[0]

    with pytest.raises(UnsupportedOps) as caught:
        import_module(Odd(), (torch.randn(4, 8),), "odd")
    found = {u.target: u for u in caught.value.found}
    assert set(found) == {"aten.cumsum.default", "aten.sort.default"}
    assert found["aten.cumsum.default"].count == 2
    assert found["aten.cumsum.default"].source == f"{__file__}:{_line('y = torch.cumsum(')}"
    assert "aten.cumsum.default x2" in str(caught.value)


def test_a_mapped_op_in_a_form_not_supported_says_why():
    class Grouped(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, groups=2)

        def forward(self, x):
            return torch.flatten(self.conv(x), 1)

    with pytest.raises(UnsupportedOps, match=r"aten.conv2d.default x1 in conv .*grouped "
                                             r"convolution \(groups=2\)"):
        import_module(Grouped(), (torch.randn(2, 4, 8, 8),), "grouped")


def test_data_dependent_control_flow_points_to_torch_export():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(GraphError, match="torch.export cannot trace it"):
        import_module(Branchy(), (torch.randn(2, 3),), "branchy")


def _line(text):
    """The number of this file's first line that holds ``text``."""
    with open(__file__) as lines:
        return next(n for n, line in enumerate(lines, 1) if text in line)


# -- model files and factories --------------------------------------------------------

#: the smallest model file: model() and example_inputs, a BATCH_SIZE and a docstring
MODEL_FILE = (Path(__file__).with_name("torch_models") / "perceptron.py").read_text()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_model_file_with_model_and_example_inputs_loads_at_any_batch(tmp_path):
    path = write(tmp_path, "tiny.py", MODEL_FILE)
    graph = load_model(str(path))
    assert graph.batch_size == 8 and graph.name == "tiny"
    assert [op.type for op in graph.ops] == ["input", "reshape", "linear", "unary", "linear",
                                            "input", "softmax_ce"]
    assert load_model(str(path), batch_size=24).batch_size == 24


def test_a_factory_in_an_importable_module(tmp_path, monkeypatch):
    write(tmp_path, "user_models.py", MODEL_FILE.replace("def model(", "def perceptron("))
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = load_model("user_models:perceptron", batch_size=4)
    assert graph.name == "perceptron" and graph.batch_size == 4
    with pytest.raises(ModelError, match="user_models needs nothing_here"):
        load_model("user_models:nothing_here")
    with pytest.raises(ModelError, match="importing no_such_module raised ModuleNotFoundError"):
        load_model("no_such_module:model")


@pytest.mark.parametrize("text, problem", [
    ("X = 1\n", "defines model() and example_inputs(batch_size)"),
    (MODEL_FILE.replace("return nn.Sequential(", "raise RuntimeError('no weights')\n"
                        "    return nn.Sequential("),
     "model() raised RuntimeError: no weights"),
    (MODEL_FILE.replace("1, 8, 8", "1, 8, 9"), "torch.export cannot trace it"),
])
def test_a_bad_model_file_is_one_message_and_exit_2(tmp_path, capsys, text, problem):
    path = write(tmp_path, "bad.py", text)
    assert main(["show", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err, err


def test_a_non_tensor_example_input_is_named_and_exits_2(tmp_path, capsys):
    """An int among the example inputs is flextui's limit, said as such: not an error
    blamed on the user's forward."""
    path = write(tmp_path, "scaled.py", '''
        import torch
        from torch import nn

        class Scaled(nn.Module):
            def forward(self, x, scale):
                return x * scale

        def model():
            return Scaled()

        def example_inputs(batch_size):
            return (torch.randn(batch_size, 10), 2)
    ''')
    assert main(["show", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "its example input 'scale' is int, not a tensor" in err, err
    assert "forward raised" not in err and "Traceback" not in err, err


def test_show_lists_every_unsupported_op_and_exits_2(tmp_path, capsys):
    path = write(tmp_path, "odd.py", '''
        import torch
        from torch import nn

        class Odd(nn.Module):
            def forward(self, x):
                return torch.cumsum(torch.cumsum(x, 1), 1)

        def model():
            return Odd()

        def example_inputs(batch_size):
            return (torch.randn(batch_size, 10),)
    ''')
    assert main(["show", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "aten.cumsum.default x2" in err and f"{path}:7" in err, err


# -- the imported graph computes what the module computes ------------------------------


def module_loss_and_graph_loss(module, inputs, graph, labels):
    """The module's own cross-entropy loss and the imported graph's, one process, float64,
    the graph's parameters the module's own (by name: an op is named after its layer)."""
    from flextui.runtime.reference import forward_whole

    module = module.double()
    inputs = tuple(x.double() if x.is_floating_point() else x for x in inputs)
    expected = nn.functional.cross_entropy(module(*inputs), labels)
    params = {name: p.detach().clone() for name, p in module.named_parameters()}
    assert set(params) == set(graph.parameters)
    data = {"labels": labels, **{op.name: x for op, x in
                                 zip([op for op in graph.ops if op.type == "input"], inputs)}}
    found = forward_whole(graph, params, lambda op: data[op.name], seed=0)
    return float(expected.detach()), float(found.detach())


@pytest.mark.parametrize("make, shape", [
    (ResNetLike, (4, 3, 16, 16)),
    (lambda: nn.Sequential(nn.Flatten(), nn.Linear(48, 32), nn.Tanh(), nn.Linear(32, 16),
                           nn.Sigmoid(), nn.Linear(16, 10)), (4, 3, 4, 4)),
])
def test_the_imported_graph_computes_the_modules_loss(make, shape):
    torch.manual_seed(0)
    module = make()
    inputs = (torch.randn(*shape),)
    graph = import_module(module, inputs, "check")
    labels = torch.randint(0, 10, (shape[0],))
    expected, found = module_loss_and_graph_loss(module, inputs, graph, labels)
    assert found == pytest.approx(expected, rel=1e-9)


def test_in_place_ops_map_as_their_results_unless_a_view_reads_the_old_tensor():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            out = self.fc(x)
            out += x
            return self.act(out)

    graph = import_module(Residual(), (torch.randn(3, 6),), "residual")
    assert [op.type for op in graph.ops] == ["input", "linear", "binary", "unary", "input",
                                            "softmax_ce"]

    class Aliased(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            out = self.fc(x)
            seen = out.view(3, 2, 3)      # a view taken before the change sees it
            out.add_(x)
            return self.fc(torch.flatten(seen, 1))

    with pytest.raises(UnsupportedOps, match="aten.add_.Tensor x1 .*changed in place"):
        import_module(Aliased(), (torch.randn(3, 6),), "aliased")


def test_a_module_run_twice_keeps_one_set_of_weights():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x):
            return self.fc(torch.relu(self.fc(x)))

    module = Twice()
    graph = import_module(module, (torch.randn(3, 6),), "twice")
    first, second = (op for op in graph.ops if op.type == "linear")
    assert (first.name, second.name) == ("fc", "fc.linear_1")
    assert first.params == second.params and set(graph.parameters) == {"fc.weight", "fc.bias"}
    assert graph.param_count == sum(p.numel() for p in module.parameters())


# -- torchvision (optional: skipped where it cannot be imported) ------------------------


def torchvision_or_none():
    try:
        import torchvision
    except Exception:  # noqa: BLE001 (missing, or PyPI's build beside a CPU torch)
        return None
    return torchvision


@pytest.mark.slow
@pytest.mark.vision
@pytest.mark.parametrize("arch, size", [("resnet18", 64), ("resnet50", 64),
                                        ("inception_v3", 299)])
def test_torchvision_models_keep_their_parameters_and_compute_their_loss(arch, size):
    from flextui.graph.importer.source import BUILD_OPTIONS

    torchvision = torchvision_or_none()
    if torchvision is None:
        pytest.skip("torchvision cannot be imported beside this torch")
    torch.manual_seed(0)
    module = torchvision.models.get_model(arch, weights=None, **BUILD_OPTIONS.get(arch, {}))
    for layer in module.modules():
        if isinstance(layer, nn.Dropout):
            layer.p = 0.0            # the same mask both ways: none
    inputs = (torch.randn(2, 3, size, size),)
    graph = import_module(module, inputs, arch)
    assert graph.param_count == sum(p.numel() for p in module.parameters())
    types = [op.type for op in graph.ops]
    for layer, op_type in ((nn.Conv2d, "conv2d"), (nn.BatchNorm2d, "batchnorm"),
                           (nn.Linear, "linear")):
        assert types.count(op_type) == sum(isinstance(m, layer) for m in module.modules())
    expected, found = module_loss_and_graph_loss(module, inputs, graph,
                                                 torch.randint(0, 1000, (2,)))
    assert found == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow
@pytest.mark.vision
@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("arch", ["resnet18", "resnet50", "inception_v3"])
def test_torchvision_models_pass_a_two_rank_launch_check_against_the_module(arch, tmp_path):
    """Without --opaque, a random strategy over 2 CPU ranks trains as torchvision's
    module trained by plain PyTorch does (float64, 3 steps)."""
    if torchvision_or_none() is None:
        pytest.skip("torchvision cannot be imported beside this torch")
    proc = subprocess.run(
        [sys.executable, "-m", "flextui", "launch", "--model", f"torchvision:{arch}",
         "-b", "2", "--strategy", "random", "--seed", "2", "--nproc-per-node", "2",
         "--check"], cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout
    assert "check passed: 2 ranks equal one process of the module" in proc.stdout


@pytest.mark.vision
def test_a_torchvision_name_is_checked(capsys):
    assert main(["show", "--model", "torchvision:no_such_net"]) == 2
    err = capsys.readouterr().err
    if torchvision_or_none() is None:
        assert "torchvision:no_such_net needs torchvision, which cannot be imported" in err
    else:
        assert "unknown torchvision model 'no_such_net'; its classification models:" in err


def test_a_runs_files_are_named_without_the_colon_of_a_model_name():
    from flextui.machine import load_named_cluster
    from flextui.search.files import run_name

    graph = import_module(ResNetLike(), (torch.randn(2, 3, 8, 8),), "resnet18")
    graph.meta["model"] = "torchvision:resnet18"
    assert run_name(graph, load_named_cluster("p100-4x4")) == "torchvision-resnet18-p100-4x4"
