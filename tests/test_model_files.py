"""Model files that misbehave end in one clear message and exit 2, never a traceback,
a silent exit or corrupt ``--json`` output: one that calls ``sys.exit``, one that
prints, ``example_inputs`` with the wrong number of rows, malformed ``DEFAULTS`` and
``RANGES``."""

import json
import textwrap
from pathlib import Path

import pytest

from flextui.cli import main

TORCH_MODEL = (Path(__file__).with_name("torch_models") / "perceptron.py").read_text()

BUILDER_MODEL = textwrap.dedent('''
    from flextui.graph import GraphBuilder

    DESCRIPTION = "a builder model"
    DEFAULTS = {"batch_size": 8, "width": 16}
    RANGES = {"width": (1, 64)}


    def build(batch_size, width):
        g = GraphBuilder("b", batch_size=batch_size)
        x = g.linear(g.input((batch_size, 4)), width)
        return g.build()
''')


def show(capsys, tmp_path, text, *argv):
    path = tmp_path / "model.py"
    path.write_text(text)
    code = main(["show", "--model", str(path), "--json", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.mark.parametrize("where", ["at import", "in model()"])
def test_a_model_file_that_calls_sys_exit_is_an_error(capsys, tmp_path, where):
    text = TORCH_MODEL + "\nimport sys\nsys.exit(0)\n" if where == "at import" else \
        TORCH_MODEL.replace("    return nn.Sequential(", "    raise SystemExit(0)\n"
                            "    return nn.Sequential(")
    code, out, err = show(capsys, tmp_path, text)
    assert code == 2 and out == "" and "called sys.exit(0)" in err, err


@pytest.mark.parametrize("raised", ["GeneratorExit", "Mine('of its own')"])
@pytest.mark.parametrize("where", ["at import", "in model()"])
def test_a_model_file_that_raises_a_base_exception_is_an_error(capsys, tmp_path, raised,
                                                               where):
    """Not only an Exception: GeneratorExit, or a BaseException the file defines."""
    mine = "class Mine(BaseException):\n    pass\n"
    text = TORCH_MODEL + f"\n{mine}raise {raised}\n" if where == "at import" else \
        mine + TORCH_MODEL.replace("    return nn.Sequential(", f"    raise {raised}\n"
                                   "    return nn.Sequential(")
    code, out, err = show(capsys, tmp_path, text)
    assert code == 2 and out == "" and f"raised {raised.partition('(')[0]}" in err, err


def test_what_a_model_file_prints_goes_to_stderr_and_json_stays_json(capsys, tmp_path):
    text = TORCH_MODEL.replace("import torch\n", "import torch\nprint('loading my model')\n") \
        .replace("    return nn.Sequential(", "    print('building it')\n"
                 "    return nn.Sequential(")
    code, out, err = show(capsys, tmp_path, text)
    assert code == 0 and json.loads(out)["summary"]["batch_size"] == 8
    assert "loading my model" in err and "building it" in err


def test_example_inputs_with_the_wrong_batch_is_refused(capsys, tmp_path):
    text = TORCH_MODEL.replace("torch.randn(batch_size,", "torch.randn(batch_size + 1,")
    code, out, err = show(capsys, tmp_path, text, "-b", "8")
    assert code == 2 and out == ""
    assert "example_inputs(8) returned 9 rows" in err and "batch_size rows" in err, err


@pytest.mark.parametrize("old, new, problem", [
    ('DEFAULTS = {"batch_size": 8, "width": 16}', "DEFAULTS = 5", "DEFAULTS must be a dict"),
    ('DEFAULTS = {"batch_size": 8, "width": 16}', 'DEFAULTS = {"width": [1]}',
     "DEFAULTS must be a dict"),
    ('RANGES = {"width": (1, 64)}', 'RANGES = {"width": 5}', "RANGES must map"),
    ('RANGES = {"width": (1, 64)}', 'RANGES = {"width": (64, 1)}', "least first"),
    ('RANGES = {"width": (1, 64)}', 'RANGES = {"depth": (1, 2)}', "RANGES must map"),
    ('RANGES = {"width": (1, 64)}', 'RANGES = {"width": ("a", "b")}', "RANGES must map"),
    ('DESCRIPTION = "a builder model"', "DESCRIPTION = None", "DESCRIPTION must be a string"),
    ('RANGES = {"width": (1, 64)}', 'RANGES = {"width": (1, 64)}\nPAPER_BATCH_PER_DEVICE = 0',
     "PAPER_BATCH_PER_DEVICE must be a whole number from 1"),
    ('RANGES = {"width": (1, 64)}', 'RANGES = {"width": (1, 64)}\nPAPER_BATCH_PER_DEVICE = "64"',
     "PAPER_BATCH_PER_DEVICE must be a whole number from 1"),
], ids=["defaults-5", "defaults-list", "ranges-5", "ranges-reversed", "ranges-unknown",
        "ranges-text", "description", "paper-batch-0", "paper-batch-text"])
def test_malformed_defaults_and_ranges_are_one_message(capsys, tmp_path, old, new, problem):
    code, out, err = show(capsys, tmp_path, BUILDER_MODEL.replace(old, new))
    assert code == 2 and out == "" and problem in err, err


def test_a_good_builder_model_file_still_shows(capsys, tmp_path):
    code, out, _ = show(capsys, tmp_path, BUILDER_MODEL, "-o", "width=32")
    assert code == 0 and json.loads(out)["summary"]["options"]["width"] == 32
