"""The Setup screen: pick a model (library or file) and its batch size, a cluster
(library, file, or this machine) and the search options, watch a summary of the
choice, and start a search with one key.

The model and cluster load in thread workers (Inception takes a moment), a short
while after the last keystroke; the search options are checked as they are typed.
Every turning of text into values is a core call the CLI makes too
(:mod:`flextui.session.choices`, :func:`flextui.search.options.search_options`); a bad
value shows inline, next to its part of the form, and nothing starts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, cast

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Label, Select, Static
from textual.worker import Worker, WorkerState

from flextui.cost.choose import CostKind
from flextui.cost.optimizers import OptimizerKind
from flextui.defaults import DEFAULT_MODEL
from flextui.errors import FieldError, FlextuiError
from flextui.graph import OpGraph
from flextui.graph.library import model_info, model_names
from flextui.graph.summary import graph_summary
from flextui.machine import Cluster, cluster_names
from flextui.machine.library import LOCAL, cpu_ranks_name
from flextui.machine.summary import cluster_summary
from flextui.search.options import BETA_SCALE, DEFAULT_BUDGET, SearchOptions, search_options
from flextui.session.choices import (
    FIRST_CLUSTER,
    FIRST_CLUSTER_NODES,
    FirstChoice,
    cpu_ranks_choice,
    first_choice,
    form_batch,
    load_cluster_choice,
    load_model_choice,
)
from flextui.sim.memory import MemoryPolicy
from flextui.strategy.pipeline import Schedule
from flextui.strategy.precision import Precision
from flextui.tui.screens.keys import KeyScreen
from flextui.tui.widgets.summary import SetupSummary

DEBOUNCE_S = 0.3
DIGITS = r"[0-9]*"
LOCAL_LABEL = "local: detected machine"
COST_LABELS = {CostKind.ANALYTIC: "analytic (roofline)",
               CostKind.PROFILED: "profiled (flextui profile; analytic where missing)",
               CostKind.RECORDED: "recorded (in launches; else profiled, analytic)",
               CostKind.AUTO: "auto (profiled where measured, else analytic)"}
MEMORY_LABELS = {MemoryPolicy.PENALIZE: "penalize (+1 ms/MB over)",
                 MemoryPolicy.REJECT: "reject over memory", MemoryPolicy.IGNORE: "ignore memory"}
OPTIMIZER_LABELS = {OptimizerKind.SGD: "SGD with momentum (1 state)",
                    OptimizerKind.ADAMW: "AdamW (2 states)"}
PRECISION_LABELS = {Precision.FP32: "fp32", Precision.BF16: "bf16 mixed (fp32 master)"}
#: the moves a search may make to fit memory (the CLI's --no-recompute and --no-shard),
#: by choice: the options each choice turns off
MEMORY_MOVES = {"all": ("splits, recomputation, sharding", {}),
                "no-shard": ("splits and recomputation", {"shard": 0.0}),
                "splits": ("splits only", {"recompute": 0.0, "shard": 0.0})}
#: how the chains pipeline (the CLI's --microbatches, --schedule and --no-pipeline), by
#: choice: the options each choice sets
PIPELINES: dict[str, tuple[str, dict[str, object]]] = {
    "moves": ("moves may pipeline", {}),
    "4-1f1b": ("4 micro-batches, 1F1B",
               {"microbatches": 4, "schedule": Schedule.ONE_F_ONE_B}),
    "8-1f1b": ("8 micro-batches, 1F1B",
               {"microbatches": 8, "schedule": Schedule.ONE_F_ONE_B}),
    "4-gpipe": ("4 micro-batches, GPipe", {"microbatches": 4}),
    "off": ("no pipelines", {"pipeline": 0.0, "stage": 0.0})}
#: the inputs of each part that loads in the background, in the order its loader takes them
PARTS = {"model": ("model-name", "model-path", "batch-size", "batch-per-device", "model-options"),
         "cluster": ("cluster-name", "cluster-path", "nodes")}
OPTION_FIELDS = ("budget", "beta", "workers", "seed", "memory", "memory-budget", "moves",
                 "optimizer", "precision", "pipeline")
#: FieldError.field -> the id of the input it is about
FIELD_INPUTS = {"batch_size": "batch-size", "batch_per_device": "batch-per-device",
                "option": "model-options", "nodes": "nodes",
                "budget": "budget", "beta": "beta", "workers": "workers", "seed": "seed",
                "memory": "memory", "memory_budget": "memory-budget",
                "optimizer": "optimizer", "precision": "precision",
                "microbatches": "pipeline", "schedule": "pipeline"}


def load_model_part(name: str, path: str, batch: str, per_device: str, options: str,
                    devices: str) -> tuple[OpGraph, dict]:
    """The graph the model inputs name, and its summary (with the library's description
    and, for a batch per device, how many devices make its batch). ``devices`` is the
    loaded cluster's device count, blank when none is loaded."""
    source = path.strip() or name
    graph = load_model_choice(
        source, form_batch(batch, per_device, int(devices) if devices else None), options)
    description = model_info(source).description if source in model_names() else source
    summary = {**graph_summary(graph), "description": description}
    if per_device.strip():
        summary["batch_devices"] = int(devices)
    return graph, summary


def load_cluster_part(name: str, path: str, nodes: str) -> tuple[Cluster, dict]:
    cluster = load_cluster_choice(path.strip() or name, nodes)
    return cluster, cluster_summary(cluster)


LOADERS: dict[str, Callable[..., tuple[OpGraph | Cluster, dict]]] = {
    "model": load_model_part, "cluster": load_cluster_part}


@dataclass(frozen=True)
class Loaded:
    """What loading one part gave for the form values ``key``: a value or an error."""

    key: tuple[str, ...]
    value: Any = None
    error: str | None = None
    field: str | None = None  # the id of the input the error is about


def error_text(error: BaseException) -> str:
    if isinstance(error, FlextuiError):
        return str(error)
    return f"{type(error).__name__}: {error}"  # a broken model file, say: never a traceback


class SetupScreen(KeyScreen):
    """``model`` (a library name or a model file) and ``cluster`` (a library name, a
    TOML file or "local") preselect the form; with no cluster, the screen detects this
    machine and opens on it when it has GPUs, else on one node of the paper's P100s."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "start", "Search"),
        Binding("ctrl+s", "start", "Search", priority=True),
        Binding("m", "focus_field('model-name')", "Model"),
        Binding("c", "focus_field('cluster-name')", "Cluster"),
        Binding("o", "focus_field('budget')", "Options", show=False),  # 80 columns
        Binding("p", "profile", "Profile"),
        Binding("l", "launch", "Launch"),
    ]
    STARTS_WORK = frozenset({"start", "profile", "launch"})

    class StartSearch(Message):
        """The user asked for a search of ``graph`` on ``cluster`` with ``options`` and
        the task times ``cost`` names ("analytic" or "profiled"); the labels name them
        for people ("mlp (batch 64)", "p100-4x4@1node")."""

        def __init__(self, graph: OpGraph, cluster: Cluster, options: SearchOptions,
                     model_label: str, cluster_label: str,
                     cost: CostKind = CostKind.ANALYTIC) -> None:
            super().__init__()
            self.graph, self.cluster, self.options = graph, cluster, options
            self.model_label, self.cluster_label = model_label, cluster_label
            self.cost = cost

        what = "search"   # what the user asked for, in messages

    class StartProfile(StartSearch):
        """The user asked to profile the model's tasks for the cluster's device count."""

        what = "profile"

    class StartLaunch(StartSearch):
        """The user asked to train the model under ``strategy`` (a built-in name or a
        strategy file) on the cluster's devices here."""

        strategy = "data-parallel"
        what = "launch"

    def __init__(self, model: str | None = None, cluster: str | None = None) -> None:
        super().__init__()
        self.model_arg, self.cluster_arg = model, cluster
        self.detecting = cluster is None
        self.loaded: dict[str, Loaded] = {}
        self.pending: dict[str, tuple[Worker, tuple[str, ...]]] = {}
        self.timers: dict[str, Timer] = {}
        self.start_wanted: type[SetupScreen.StartSearch] | None = None   # what to start once loaded
        #: the option input in error and its message, while one is
        self.invalid_option: tuple[str, str] | None = None
        self.last_cluster_name = ""

    # -- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static("flextui · Setup: choose a model and a cluster; [b]s[/b] search, "
                     "[b]p[/b] profile, [b]l[/b] launch", id="setup-title")
        with Horizontal(id="setup-body"):
            with VerticalScroll(id="setup-form", can_focus=False):
                yield self._part("model", "Model", self._model_rows())
                yield self._part("cluster", "Cluster", self._cluster_rows())
                yield self._part("options", "Search", self._option_rows())
                yield self._part("launch", "Launch", [self._row("strategy", Input(
                    "data-parallel", placeholder="a built-in or path/to/strategy.json",
                    compact=True, id="launch-strategy"))])
                yield Button("Start search (s)", id="start", variant="primary", compact=True)
            with VerticalScroll(id="setup-summary-box", classes="panel") as box:
                box.border_title = "Summary"
                yield SetupSummary(id="setup-summary")
        yield Footer(compact=True)

    @staticmethod
    def _part(part: str, title: str, rows: list[Widget]) -> Vertical:
        box = Vertical(*rows, Static(id=f"{part}-error", classes="setup-error", markup=False),
                       id=f"setup-{part}", classes="panel setup-part")
        box.border_title = title
        return box

    @staticmethod
    def _row(label: str, field: Widget) -> Horizontal:
        return Horizontal(Label(label, classes="setup-label"), field, classes="setup-row")

    def _model_rows(self) -> list[Widget]:
        name, path = DEFAULT_MODEL, ""
        if self.model_arg:
            name, path = (self.model_arg, "") if self.model_arg in model_names() \
                else (DEFAULT_MODEL, self.model_arg)
        return [
            self._row("library", Select([(n, n) for n in model_names()], value=name,
                                        allow_blank=False, compact=True, id="model-name")),
            self._row("or file", Input(path, placeholder="path/to/model.py", compact=True,
                                       id="model-path")),
            self._row("batch size", Input(placeholder="model's default", restrict=DIGITS,
                                          compact=True, id="batch-size")),
            self._row("per device", Input(placeholder="or a batch on each device (paper: 64)",
                                          restrict=DIGITS, compact=True, id="batch-per-device")),
            self._row("options", Input(placeholder="key=value, ...", compact=True,
                                       id="model-options"))]

    def _cluster_rows(self) -> list[Widget]:
        name, path, nodes = FIRST_CLUSTER, "", str(FIRST_CLUSTER_NODES)
        ranks = cpu_ranks_choice()
        cpu = cpu_ranks_name(ranks)
        choices = [(LOCAL_LABEL, LOCAL), (f"{cpu}: {ranks} CPU processes", cpu),
                   *((n, n) for n in cluster_names())]
        if self.cluster_arg:
            known = self.cluster_arg in [value for _, value in choices]
            name, path, nodes = (self.cluster_arg, "", "") if known \
                else (FIRST_CLUSTER, self.cluster_arg, "")
        self.last_cluster_name = name
        return [
            self._row("library", Select(choices, value=name, allow_blank=False, compact=True,
                                        id="cluster-name")),
            self._row("or file", Input(path, placeholder="path/to/cluster.toml",
                                       compact=True, id="cluster-path")),
            self._row("nodes", Input(nodes, placeholder="as defined", restrict=DIGITS,
                                     compact=True, id="nodes"))]

    def _option_rows(self) -> list[Widget]:
        return [
            self._row("budget", Input(DEFAULT_BUDGET, placeholder="30s, 2m or 5000 steps",
                                      compact=True, id="budget")),
            self._row("β", Input(placeholder=f"auto ({BETA_SCALE} / initial ms)", compact=True,
                                 id="beta")),
            self._row("workers", Input("1", restrict=DIGITS, compact=True, id="workers")),
            self._row("seed", Input("0", restrict=r"-?[0-9]*", compact=True, id="seed")),
            self._row("memory", Select([(MEMORY_LABELS[p], p) for p in MemoryPolicy],
                                       value=MemoryPolicy.PENALIZE, allow_blank=False, compact=True,
                                       id="memory")),
            self._row("mem budget", Input(placeholder="none, or 12GiB per device",
                                          compact=True, id="memory-budget")),
            self._row("moves", Select([(label, key) for key, (label, _) in MEMORY_MOVES.items()],
                                      value="all", allow_blank=False, compact=True,
                                      id="moves")),
            self._row("optimizer", Select([(OPTIMIZER_LABELS[o], o) for o in OptimizerKind],
                                          value=OptimizerKind.SGD, allow_blank=False,
                                          compact=True, id="optimizer")),
            self._row("precision", Select([(PRECISION_LABELS[p], p) for p in Precision],
                                          value=Precision.FP32, allow_blank=False,
                                          compact=True, id="precision")),
            self._row("pipeline", Select([(label, key) for key, (label, _) in PIPELINES.items()],
                                         value="moves", allow_blank=False, compact=True,
                                         id="pipeline")),
            self._row("task times", Select([(COST_LABELS[c], c) for c in CostKind],
                                           value=CostKind.ANALYTIC, allow_blank=False, compact=True,
                                           id="cost"))]

    # -- lifecycle and events -----------------------------------------------------------

    def on_mount(self) -> None:
        self.query_one("#start", Button).focus()
        self._check_options()
        self.call_after_refresh(self._start_loading)   # the form shows first

    def on_screen_resume(self) -> None:
        """Back from another screen (a search started from a field with ctrl+s, say),
        focus is never left in a text field: the keys are the footer's again."""
        if isinstance(self.focused, Input):
            self.query_one("#start", Button).focus()

    def _start_loading(self) -> None:
        """Load the model, and detect this machine or load the cluster, in threads (the
        first detection imports torch: seconds)."""
        self._request("model")
        if self.detecting:
            self._summary().show("cluster", "Cluster", "detecting this machine…")
            self.run_worker(first_choice, name="detect", thread=True, exit_on_error=False)
        else:
            self._request("cluster")

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "cluster-path" and event.value.strip():
            self.query_one("#nodes", Input).value = ""  # a file is used as it is
        self._changed(event.input.id)

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "cluster-name" and event.value != self.last_cluster_name:
            self.last_cluster_name = str(event.value)
            self.query_one("#nodes", Input).value = ""  # a count for the cluster before
        self._changed(event.select.id)

    def on_input_submitted(self) -> None:
        self.action_start()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()

    def _changed(self, field: str | None) -> None:
        if field in OPTION_FIELDS:
            self._check_options()
        for part, fields in PARTS.items():
            if field in fields:
                self._schedule(part)

    def _schedule(self, part: str) -> None:
        if part in self.timers:
            self.timers[part].stop()
        self.timers[part] = self.set_timer(DEBOUNCE_S, partial(self._request, part))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if worker.name == "detect" and worker.is_finished:
            self._detected(worker.result if event.state == WorkerState.SUCCESS else None)
            return
        part = worker.name
        if part not in self.pending or self.pending[part][0] is not worker:
            return  # a load the form has moved on from
        key = self.pending[part][1]
        if event.state == WorkerState.SUCCESS:
            value, summary = cast(tuple[Any, dict], worker.result)  # what LOADERS return
            self._show_loaded(part, Loaded(key, value=value), summary)
        elif event.state in (WorkerState.ERROR, WorkerState.CANCELLED):
            self._show_loaded(part, self._failed(part, key, worker.error), None)

    # -- loading ------------------------------------------------------------------------

    def _key(self, part: str) -> tuple[str, ...]:
        """What ``part``'s loader takes: its fields, and for the model the device count
        a batch per device counts."""
        key = tuple(self._text(field) for field in PARTS[part])
        return key + (self._devices(),) if part == "model" else key

    def _devices(self) -> str:
        """The device count of the cluster the form names, when a batch per device needs
        it and that cluster is loaded without error; else blank."""
        loaded = self.loaded.get("cluster")
        if not self._text("batch-per-device").strip() or self._cluster_pending() \
                or loaded is None or loaded.error:
            return ""
        return str(cast(Cluster, loaded.value).num_devices)

    def _cluster_pending(self) -> bool:
        """The cluster the form names is being detected or loaded."""
        loaded = self.loaded.get("cluster")
        return self.detecting or loaded is None or loaded.key != self._key("cluster")

    def _text(self, field: str) -> str:
        widget = self.query_one(f"#{field}")
        return str(widget.value) if isinstance(widget, (Input, Select)) else ""

    def _request(self, part: str, force: bool = False) -> None:
        """Load ``part`` from the form in a thread, unless it is loaded or loading."""
        if part == "cluster" and self.detecting:
            return
        if part == "model" and self._text("batch-per-device").strip() \
                and self._cluster_pending():
            self.pending.pop(part, None)  # loaded when the cluster is
            self._summary().show(part, "Model", "waiting for the cluster's devices…")
            return
        key = self._key(part)
        if not force and part in self.pending and self.pending[part][1] == key:
            return
        self._summary().show(part, part.title(), "loading…")
        worker = self.run_worker(partial(LOADERS[part], *key), name=part, group=part,
                                 thread=True, exclusive=True, exit_on_error=False)
        self.pending[part] = (worker, key)

    def _failed(self, part: str, key: tuple[str, ...], error: BaseException | None) -> Loaded:
        field = FIELD_INPUTS.get(error.field) if isinstance(error, FieldError) else None
        name, path = PARTS[part][:2]
        return Loaded(key, error=error_text(error) if error else "stopped",
                      field=field or (path if self._text(path).strip() else name))

    def _show_loaded(self, part: str, loaded: Loaded, summary: dict | None) -> None:
        self.loaded[part] = loaded
        self._show_error(part, loaded.error, loaded.field)
        self._summary().show(part, f"{part.title()} {self._label(part, loaded.value)}",
                             summary if summary is not None else "see the error")
        if part == "cluster":
            self._request("model")  # a batch per device counts its devices
        if self.start_wanted:
            self._try_start()

    def _detected(self, choice: FirstChoice | None) -> None:
        """Open on the detected default, unless the user has picked a cluster already."""
        self.detecting = False
        untouched = self._key("cluster") == (FIRST_CLUSTER, "", str(FIRST_CLUSTER_NODES))
        if choice is not None and untouched and choice.cluster != FIRST_CLUSTER:
            self.last_cluster_name = choice.cluster
            self.query_one("#cluster-name", Select).value = choice.cluster
            self.query_one("#nodes", Input).value = "" if choice.nodes is None \
                else str(choice.nodes)
        self._request("cluster")

    # -- options and starting -----------------------------------------------------------

    def _check_options(self) -> SearchOptions | None:
        try:
            options = search_options(self._text("budget"), seed=self._text("seed"),
                                     workers=self._text("workers"), beta=self._text("beta"),
                                     memory=self._text("memory"),
                                     memory_budget=self._text("memory-budget"),
                                     optimizer=self._text("optimizer"),
                                     precision=self._text("precision"),
                                     **MEMORY_MOVES[self._text("moves")][1],
                                     **PIPELINES[self._text("pipeline")][1])
        except FieldError as e:
            self.invalid_option = (FIELD_INPUTS[e.field], str(e))
            self._show_error("options", str(e), FIELD_INPUTS[e.field])
            self._summary().show("options", "Search", "see the error")
            return None
        self.invalid_option = None
        self._show_error("options", None, None)
        self._summary().show("options", "Search", options)
        return options

    def action_start(self, wanted: type[SetupScreen.StartSearch] | None = None) -> None:
        """Start the search (or what ``wanted`` asks for) once the model and cluster are
        loaded and the form is valid."""
        self.start_wanted = wanted or self.StartSearch
        retried = [part for part, loaded in self.loaded.items()
                   if loaded.error and loaded.key == self._key(part)]
        for part in [part for part, loaded in self.loaded.items() if loaded.error]:
            del self.loaded[part]
            self._request(part, force=True)  # a missing file may be there now
        self._try_start()
        if self.start_wanted and not retried:  # a retry that fails again says so
            self.notify(f"Loading… the {self.start_wanted.what} starts when the model and "
                        "cluster are ready.", timeout=3)

    def action_profile(self) -> None:
        self.action_start(self.StartProfile)

    def action_launch(self) -> None:
        self.action_start(self.StartLaunch)

    def _try_start(self) -> None:
        options = self._check_options()
        if options is None:
            assert self.invalid_option is not None  # what _check_options found
            self._stop_wanting(*self.invalid_option)
            return
        for part in PARTS:
            self._request(part)
        parts = [self.loaded.get(part) for part in PARTS]
        if self.detecting or any(p is None or p.key != self._key(name)
                                 for p, name in zip(parts, PARTS)):
            return  # a load that finishes tries again
        loaded = cast(list[Loaded], parts)  # none is None now
        failed = next((part for part, p in zip(PARTS, loaded) if p.error), None)
        if failed:
            self._stop_wanting(self.loaded[failed].field, self.loaded[failed].error or "")
            return
        wanted, self.start_wanted = self.start_wanted, None
        assert wanted is not None  # this runs only while a start is wanted
        model, cluster = loaded
        message = wanted(model.value, cluster.value, options, self._label("model", model.value),
                         self._label("cluster", cluster.value), CostKind(self._text("cost")))
        if isinstance(message, self.StartLaunch):
            message.strategy = self._text("launch-strategy").strip() or message.strategy
        self.post_message(message)

    def _stop_wanting(self, field: str | None, error: str) -> None:
        """Do not start: say which field is wrong and why, and focus it."""
        wanted, self.start_wanted = self.start_wanted, None
        assert wanted is not None  # this runs only while a start is wanted
        where = self._field_name(field) if field else "the form"
        self.notify(f"No {wanted.what} started: fix {where}: {error}", severity="error",
                    timeout=8)
        if field:
            self.query_one(f"#{field}").focus()

    def _field_name(self, field: str) -> str:
        """How the form names the input ``field``: its part and its row ("Model batch
        size", "Cluster file")."""
        row = self.query_one(f"#{field}").parent
        assert isinstance(row, Widget) and isinstance(row.parent, Widget)
        label = str(row.query_one(Label).content).removeprefix("or ")
        return f"{row.parent.border_title} {label}"

    def typed_model(self) -> str:
        """The model the form names: its file, else its library model."""
        return self._text("model-path").strip() or self._text("model-name")

    def action_focus_field(self, field: str) -> None:
        self.query_one(f"#{field}").focus()

    # -- showing ------------------------------------------------------------------------

    def _summary(self) -> SetupSummary:
        return self.query_one("#setup-summary", SetupSummary)

    def _show_error(self, part: str, message: str | None, field: str | None) -> None:
        error = self.query_one(f"#{part}-error", Static)
        error.update(f"✗ {message}" if message else "")
        error.set_class(bool(message), "-shown")
        fields = PARTS.get(part, OPTION_FIELDS)
        for name in fields:
            self.query_one(f"#{name}").set_class(name == field, "setup-invalid")

    @staticmethod
    def _label(part: str, value: OpGraph | Cluster | None) -> str:
        if value is None:
            return ""
        if part == "model":
            graph = cast(OpGraph, value)
            return f"{graph.meta.get('model', graph.name)} (batch {graph.batch_size})"
        return value.name
