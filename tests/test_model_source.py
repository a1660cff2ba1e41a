"""A model's code runs only from what the user gave in this process (``ModelSource``):
a search log, plan or strategy that names a model file, a ``package.module:factory``
or an opaque op's module never makes flextui run it; a replayed search of a PyTorch
model launches only with the model given again, and only if it builds the log's graph.
A model file travels as its bytes, so no launch reads it again from a path."""

import hashlib
import os
import threading
from pathlib import Path

import pytest

from flextui.cost import AnalyticCostModel
from flextui.errors import FlextuiError, ModelError
from flextui.fields import FieldReader
from flextui.graph import graph_from_dict
from flextui.graph.library import load_model, model_source, with_source
from flextui.graph.model_source import ModelSource, SourceKind
from flextui.machine import load_named_cluster
from flextui.machine.detect import cpu_ranks
from flextui.runtime.job import execute, prepare
from flextui.runtime.spec import LaunchSpec, Training
from flextui.search import SearchOptions, run_search
from flextui.session.launching import launch_request
from flextui.strategy import builtin_strategy
from flextui.tui.app import FlextuiApp
from flextui.tui.screens.dialogs import ErrorDialog
from flextui.tui.screens.search import SearchScreen
from helpers import wait_for

OPAQUE_NET = Path(__file__).with_name("torch_models") / "grouped_cumsum.py"
PERCEPTRON = Path(__file__).with_name("torch_models") / "perceptron.py"


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A user's model file, and code that leaves a marker file whenever it is imported:
    a model file ``evil.py`` and a module ``evilpkg`` on the path (of this process and
    of any it starts)."""
    marker = tmp_path / "ran"
    evil = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
    (tmp_path / "evil.py").write_text(evil + "def build(**options): pass\n")
    package = tmp_path / "modules"
    package.mkdir()
    (package / "evilpkg.py").write_text(evil + PERCEPTRON.read_text())
    monkeypatch.syspath_prepend(str(package))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(package), os.environ.get("PYTHONPATH")])))
    tiny = tmp_path / "tiny.py"
    tiny.write_text(PERCEPTRON.read_text())
    return tiny, marker


def as_read_from_a_file(graph, where: str, names: str):
    """``graph`` as a log, plan or strategy holds it, with ``names`` (code to run)
    written into it where an attacker would: the graph's ``meta.module`` or every
    opaque op's ``attrs.module`` (what flextui used to run)."""
    data = graph.to_dict()
    if where == "meta":
        data["meta"] = {**data["meta"], "module": names}
    else:
        data["ops"] = [{**op, "attrs": {**op["attrs"], "module": names}}
                       if op["type"] == "opaque" else op for op in data["ops"]]
    return graph_from_dict(data)


def launched(graph, tmp_path):
    """Launch ``graph`` data-parallel on one CPU rank: the refusal's words, or None when
    it ran."""
    cluster = cpu_ranks(1)
    try:
        prepared = prepare(graph, builtin_strategy("data-parallel", graph, cluster), cluster,
                           Training(steps=1, warmup=0), AnalyticCostModel(),
                           run_log=tmp_path / "run.ffrun")
    except FlextuiError as exc:
        return str(exc)
    execute(prepared, threading.Event())
    return None


ATTACKS = [("meta", "file"), ("meta", "factory"), ("opaque", "file")]


@pytest.mark.parametrize("where, kind", ATTACKS)
def test_a_graph_read_from_a_file_never_runs_the_code_it_names(files, tmp_path, where, kind):
    tiny, marker = files
    names = str(tmp_path / "evil.py") if kind == "file" else "evilpkg:model"
    built = load_model(str(OPAQUE_NET), opaque=True) if where == "opaque" \
        else load_model(str(tiny))
    graph = as_read_from_a_file(built, where, names)
    refusal = launched(graph, tmp_path)
    assert not marker.exists(), "the code the data names ran"
    assert refusal is not None and "flextui replay LOG --model FILE" in refusal, refusal
    assert "Setup model field" in refusal
    # the user's own model given again does not build the graph the file describes
    with pytest.raises(ModelError, match="does not build the graph"):
        with_source(graph, built.source)
    assert not marker.exists()


def test_a_graph_read_from_a_file_runs_with_the_model_given_again(files):
    tiny, _ = files
    built = load_model(str(tiny))
    read = graph_from_dict(built.to_dict())
    assert read.imported and read.source is None
    again = with_source(read, model_source(str(tiny)))
    assert again.fingerprint == read.fingerprint and again.source == built.source
    with pytest.raises(ModelError, match="flextui replay LOG --model FILE"):
        with_source(read, model_source("lenet"))   # a built-in never builds an import


async def test_l_on_a_replayed_log_that_names_a_model_file_runs_nothing(files, tmp_path):
    """The report's attack: a search log's header names a .py file as the graph's
    module (fingerprint recomputed); replayed in the app, ``l`` launches nothing: a
    dialog says how to give the model, and the model given builds another graph."""
    tiny, marker = files
    graph = as_read_from_a_file(load_model(str(tiny)), "meta", str(tmp_path / "evil.py"))
    log = tmp_path / "evil.ffsearch"
    run_search(graph, load_named_cluster("local-cpu-2"), AnalyticCostModel(),
               SearchOptions(iterations=20, seed=1), log_path=log)
    for typed, says in ((None, "flextui replay LOG --model FILE"),
                        (str(tiny), "does not build the graph")):
        app = FlextuiApp(replay=log, model=typed)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, SearchScreen)
                           and app.screen.view is not None and app.screen.view.best)
            await pilot.press("l")
            await wait_for(pilot, lambda: marker.exists() or isinstance(app.screen, ErrorDialog))
            assert not marker.exists(), "the file the log names ran"
            assert app.screen.heading == "Cannot launch this strategy"
            assert says in app.screen.message, app.screen.message
            assert not app.launches and not marker.exists()


def test_a_replayed_search_launches_the_model_typed_again(files, tmp_path):
    tiny, _ = files
    cluster = load_named_cluster("local-cpu-2")
    read = graph_from_dict(load_model(str(tiny)).to_dict())
    request = launch_request(read, builtin_strategy("data-parallel", read, cluster), cluster,
                             AnalyticCostModel(), "tiny", tmp_path,
                             model=model_source(str(tiny)))
    assert request.prepared.spec.graph.source.code == tiny.read_bytes()


def test_a_model_file_is_its_bytes_from_where_it_was_typed(files, tmp_path, monkeypatch):
    """The path is made absolute against the directory it was typed in and the bytes
    read then: the graph builds again from them elsewhere, with the file gone."""
    tiny, _ = files
    monkeypatch.chdir(tmp_path)
    source = model_source("tiny.py")
    assert source.kind == SourceKind.FILE and source.name == str(tiny)
    assert source.sha256 == hashlib.sha256(tiny.read_bytes()).hexdigest()
    first = load_model(source)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    tiny.unlink()
    assert load_model(source).fingerprint == first.fingerprint
    with pytest.raises(ModelError, match="model file tiny.py does not exist"):
        model_source("tiny.py")


def test_the_launch_plan_carries_the_source_and_checks_its_bytes(files):
    tiny, _ = files
    graph = load_model(str(tiny))
    spec = LaunchSpec(graph, builtin_strategy("data-parallel", graph, cpu_ranks(2)), 2,
                      Training())
    decoded = LaunchSpec.decode(spec.encode(), "plan")
    assert decoded.graph.source == graph.source and decoded.graph.fingerprint == \
        graph.fingerprint
    assert spec.to_dict()["model"] == {"kind": "file", "name": str(tiny),
                                       "sha256": graph.source.sha256}  # a run log's: no bytes
    body = spec.to_dict(code=True)
    body["model"]["code"] += b"import os\n"
    with pytest.raises(FlextuiError, match="do not match its sha256"):
        ModelSource.from_dict(body["model"], FieldReader("plan"))
    body["model"] = None
    from flextui.runtime.spec import LAUNCH
    with pytest.raises(FlextuiError, match="carries no model source"):
        LaunchSpec.decode(LAUNCH.encode(body), "plan")


def test_a_hugging_face_source_names_its_model_or_carries_its_config(tmp_path):
    from flextui.graph.library import model_info
    named = model_source("hf:gpt2")
    assert (named.kind, named.name, named.text, named.module) == \
        ("hf", "gpt2", "hf:gpt2", "transformers")
    f = FieldReader("plan")
    assert ModelSource.from_dict(named.to_dict(), f) == named
    config = tmp_path / "mine.json"
    config.write_text('{"model_type": "gpt2"}')
    carried = model_source(f"hf:{config.name}", cwd=tmp_path)
    assert carried.code == config.read_bytes() and carried.label == "hf:mine"
    assert ModelSource.from_dict(carried.to_dict(), f) == carried
    assert model_info("hf:llama").defaults["num_hidden_layers"] == 2   # no transformers needed
    with pytest.raises(ModelError, match="hf:gpt2, hf:llama, hf:bert, hf:t5, hf:vit"):
        model_info("hf:gpt3")
    with pytest.raises(ModelError, match="is not hf:NAME or hf:CONFIG.json"):
        model_source("hf:../x")
