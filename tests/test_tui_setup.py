"""The Setup screen, driven with Pilot in a small host app that records StartSearch."""

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Static
from textual.worker import WorkerFailed

from flextui.graph.library import load_model
from flextui.machine import load_named_cluster
from flextui.tui.screens import setup
from flextui.tui.screens.setup import SetupScreen
from flextui.tui.widgets.summary import SetupSummary, options_rows
from helpers import screen_text, wait_for

CSS = Path(__file__).parent.parent / "flextui" / "tui" / "app.tcss"
FIELDS = ["model-name", "model-path", "batch-size", "batch-per-device", "model-options",
          "cluster-name",
          "cluster-path", "nodes", "budget", "beta", "workers", "seed", "memory",
          "memory-budget", "moves", "optimizer", "precision", "pipeline", "cost",
          "launch-strategy",
          "start"]


class Host(App):
    CSS_PATH = CSS

    def __init__(self, **choice: str) -> None:
        super().__init__()
        self.choice, self.started, self.notes = choice, [], []

    def notify(self, message, **kwargs) -> None:
        self.notes.append(message)
        super().notify(message, **kwargs)

    def on_mount(self) -> None:
        self.push_screen(SetupScreen(**self.choice))

    def on_setup_screen_start_search(self, message: SetupScreen.StartSearch) -> None:
        self.started.append(message)


@pytest.fixture(autouse=True)
def cpu_only(monkeypatch):
    """A machine with no GPU, and no waiting for the typing to pause."""
    monkeypatch.setattr("flextui.machine.detect.detect_local",
                        lambda: load_named_cluster("local-cpu"))
    monkeypatch.setattr(setup, "DEBOUNCE_S", 0.01)


async def settle(pilot) -> None:
    """Let debounce timers fire and the loads finish. A load of a bad value fails, and
    the screen shows its error (which the tests read): waiting ignores that failure, as
    ``wait_for_complete`` did only when the load had ended before the wait began (on a
    busy machine it had not, and the test failed)."""
    for _ in range(3):
        await pilot.pause(0.05)
        for worker in list(pilot.app.workers):
            try:
                await worker.wait()
            except WorkerFailed:
                pass
    await pilot.pause()


def field(pilot, name: str):
    return pilot.app.screen.query_one(f"#{name}")


def part(pilot, name: str):
    return pilot.app.screen.query_one(SetupSummary).parts[name][1]


def error(pilot, name: str) -> str:
    return str(pilot.app.screen.query_one(f"#{name}-error", Static).render())


async def test_opens_on_the_default_with_a_summary():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert field(pilot, "model-name").value == "mlp"
        assert (field(pilot, "cluster-name").value, field(pilot, "nodes").value) == ("p100-4x4", "1")
        model, cluster = part(pilot, "model"), part(pilot, "cluster")
        assert model["ops"] == len(load_model("mlp")) and model["parameters"] > 0
        assert cluster["devices"] == 4 and cluster["intra_node_bandwidth"] > 0
        assert part(pilot, "options").time_limit == 30.0
        assert app.focused.id == "start"


async def test_a_machine_with_gpus_is_the_default(monkeypatch):
    monkeypatch.setattr("flextui.machine.detect.detect_local",
                        lambda: load_named_cluster("dgx-a100"))
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert (field(pilot, "cluster-name").value, field(pilot, "nodes").value) == ("local", "")
        assert part(pilot, "cluster")["device_kinds"] == {"A100-SXM4-80GB": 8}


async def test_changing_model_batch_size_and_cluster_updates_the_summary():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        field(pilot, "model-name").value = "lenet"
        await settle(pilot)
        lenet = load_model("lenet")
        assert part(pilot, "model")["ops"] == len(lenet)
        assert part(pilot, "model")["parameters"] == lenet.param_count
        field(pilot, "batch-size").focus()
        for key in "256":
            await pilot.press(key)
        await settle(pilot)
        assert part(pilot, "model")["batch_size"] == 256
        assert part(pilot, "model")["forward_flops"] == pytest.approx(4 * lenet.total_flops()[0])
        field(pilot, "cluster-name").value = "k80-16x4"
        await settle(pilot)
        assert field(pilot, "nodes").value == ""  # the count was for the cluster before
        assert part(pilot, "cluster")["devices"] == 64


async def test_the_summary_names_the_optimizer_precision_and_pipeline_chosen():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        rows = dict(options_rows(part(pilot, "options")))
        assert (rows["training"], rows["pipeline"]) == ("sgd, fp32", "moves may pipeline")
        field(pilot, "optimizer").value = "adamw"
        field(pilot, "precision").value = "bf16"
        field(pilot, "pipeline").value = "4-1f1b"
        await settle(pilot)
        rows = dict(options_rows(part(pilot, "options")))
        assert rows["training"] == "adamw, bf16"
        assert rows["pipeline"] == "4 micro-batches, 1f1b, moves may change it"
        field(pilot, "pipeline").value = "off"
        await settle(pilot)
        assert dict(options_rows(part(pilot, "options")))["pipeline"] == "none"


@pytest.mark.parametrize("name, value, part_name, text, where, good", [
    ("batch-size", "0", "model", "batch size must be at least 1", "Model batch size", "8"),
    ("batch-per-device", "0", "model", "batch per device must be at least 1",
     "Model per device", "16"),
    ("budget", "soon", "options", "give a number of iterations", "Search budget", "30s"),
    ("workers", "0", "options", "workers must be at least 1", "Search workers", "1"),
    ("memory-budget", "0.5", "options", "less than 1 MiB", "Search mem budget", ""),
    ("nodes", "100000", "cluster", "over flextui's limit of 65,536", "Cluster nodes", "1"),
    ("cluster-path", "nowhere.toml", "cluster", "no such cluster file", "Cluster file", ""),
    ("model-path", "nowhere/model.py", "model", "does not exist", "Model file", "")])
async def test_bad_values_show_inline_and_a_start_names_them(name, value, part_name, text,
                                                             where, good):
    """A bad value shows next to its field; ctrl+s then says which field and why (not
    "Loading…", which promised a start that never came), starts nothing and focuses
    it; once the field is fixed, ctrl+s starts."""
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        field(pilot, name).value = value
        await settle(pilot)
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert text in error(pilot, part_name) and field(pilot, name).has_class("setup-invalid")
        assert app.started == [] and app.focused.id == name
        [said] = app.notes
        assert said.startswith(f"No search started: fix {where}: ") and text in said
        field(pilot, name).value = good
        await pilot.press("ctrl+s")
        await settle(pilot)
        assert len(app.started) == 1


async def test_a_batch_per_device_counts_the_chosen_clusters_devices():
    """The per-device field sets the global batch from the cluster's devices, shows it,
    follows a change of cluster, and refuses a batch size given too."""
    app = Host()
    async with app.run_test(size=(120, 30)) as pilot:
        field(pilot, "model-name").value = "lenet"
        field(pilot, "nodes").value = ""  # p100-4x4 as defined: 16 GPUs, not one node's 4
        field(pilot, "batch-per-device").focus()
        for key in "64":
            await pilot.press(key)
        await settle(pilot)
        assert part(pilot, "model")["batch_size"] == 1024
        assert "1,024 (64 × 16 devices)" in screen_text(app)
        field(pilot, "cluster-name").value = "k80-16x4"
        await settle(pilot)
        assert part(pilot, "model")["batch_size"] == 4096
        field(pilot, "batch-size").value = "32"
        await settle(pilot)
        said = "batch per device or batch size: fill one of them, not both"
        assert said in error(pilot, "model")
        assert field(pilot, "batch-per-device").has_class("setup-invalid")
        field(pilot, "batch-size").value = ""
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.started)
        [message] = app.started
        assert message.graph.batch_size == 4096 and message.cluster.num_devices == 64
        assert message.model_label == "lenet (batch 4096)"


async def test_start_posts_the_choice():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        field(pilot, "batch-size").value = "32"
        field(pilot, "budget").value = "5000"
        field(pilot, "memory").value = "reject"
        field(pilot, "optimizer").value = "adamw"
        field(pilot, "precision").value = "bf16"
        field(pilot, "moves").value = "no-shard"
        field(pilot, "pipeline").value = "4-1f1b"
        await pilot.press("s")  # at once: the search starts when the loads are done
        await wait_for(pilot, lambda: app.started)   # and once s has been alone a moment
        [message] = app.started
        assert message.graph.batch_size == 32 and message.graph.meta["model"] == "mlp"
        assert (message.cluster.name, message.cluster.num_devices) == ("p100-4x4@1node", 4)
        assert (message.options.iterations, message.options.time_limit) == (5000, None)
        assert message.options.memory == "reject"
        assert (message.options.optimizer, message.options.precision) == ("adamw", "bf16")
        assert (message.options.recompute, message.options.shard) == (0.1, 0.0)
        assert (message.options.microbatches, message.options.schedule) == (4, "1f1b")
        assert (message.model_label, message.cluster_label) == ("mlp (batch 32)", "p100-4x4@1node")


async def test_the_cluster_list_offers_this_machines_cores_as_cpu_processes(monkeypatch):
    """local-cpu-N is a choice of the cluster list, N this machine's cores (at least 2):
    picked, it loads N CPU processes and a search starts on them."""
    monkeypatch.setattr("flextui.machine.detect.usable_cpus", lambda: 3)
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        field(pilot, "cluster-name").value = "local-cpu-3"
        await settle(pilot)
        assert part(pilot, "cluster")["devices"] == 3
        await pilot.press("ctrl+s")
        await settle(pilot)
        [message] = app.started
        assert message.cluster.name == message.cluster_label == "local-cpu-3"


async def test_preselected_and_started_with_enter():
    app = Host(model="lenet", cluster="dgx-a100")
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert field(pilot, "nodes").value == ""
        field(pilot, "seed").focus()
        await pilot.press("4", "enter")
        await settle(pilot)
        [message] = app.started
        assert message.graph.meta["model"] == "lenet" and message.cluster.num_devices == 8
        assert message.options.seed == 4


async def test_every_field_is_reachable_by_tab():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        seen = []
        for _ in range(len(FIELDS) + 1):
            await pilot.press("tab")
            seen.append(app.focused.id)
        assert seen == ["setup-summary-box"] + FIELDS


async def test_the_form_scrolls_to_the_focused_field():
    app = Host()
    async with app.run_test(size=(80, 14)) as pilot:
        await settle(pilot)
        for key, target in (("shift+tab", "launch-strategy"), ("tab", "start"),
                            ("m", "model-name")):
            await pilot.press(key)
            await pilot.pause()
            assert app.focused.id == target
            assert app.screen.find_widget(app.focused).visible_region.height == 1


async def test_single_keys_focus_the_parts():
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for key, target in (("c", "cluster-name"), ("o", "budget")):
            await pilot.press(key)
            assert app.focused.id == target
        await pilot.press("m")  # in an Input, "m" is typed, not a binding
        assert app.focused.id == "budget" and field(pilot, "budget").value.endswith("m")


def test_snapshot(snap_compare):
    async def loaded(pilot):
        await settle(pilot)

    assert snap_compare(Host(), terminal_size=(100, 30), run_before=loaded)


def test_bindings_have_descriptions():
    keys = {b.key: b.description for b in SetupScreen.BINDINGS}
    assert keys["s"] == keys["ctrl+s"] == "Search"
    assert all(keys.values())


async def test_a_file_that_appears_is_loaded_on_the_next_start(tmp_path):
    path = tmp_path / "mine.toml"
    app = Host(cluster=str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "no such cluster file" in error(pilot, "cluster")
        path.write_text((Path(__file__).parent.parent / "library" / "clusters" /
                         "dgx-a100.toml").read_text())
        await pilot.press("ctrl+s")
        await settle(pilot)
        [message] = app.started
        assert message.cluster_label == "dgx-a100" and error(pilot, "cluster") == ""


async def test_without_colour_an_error_is_marked_in_text(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.no_color
        field(pilot, "workers").value = "none"
        await settle(pilot)
        assert error(pilot, "options").startswith("✗ workers 'none'")


async def test_a_pytorch_model_file_loads_and_a_torchvision_name_is_checked():
    """The model path takes a PyTorch model file (imported off the UI thread), and
    torchvision:NAME is refused inline where torchvision cannot be imported or has no
    such model."""
    gpt = Path(__file__).with_name("torch_models") / "gpt2_decoder.py"
    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        field(pilot, "model-path").value = str(gpt)
        await settle(pilot)
        graph = load_model(str(gpt))
        assert part(pilot, "model")["ops"] == len(graph)
        assert part(pilot, "model")["parameters"] == graph.param_count
        field(pilot, "model-path").value = "torchvision:no_such_net"
        await settle(pilot)
        assert "torchvision" in error(pilot, "model")
        assert field(pilot, "model-path").has_class("setup-invalid")
