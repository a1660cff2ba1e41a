"""What ``flextui launch`` is asked to run, read from its options: how to train and where
(``asked``), the devices (``launch_cluster``), the run log beside a strategy file, and
the small model a ``--check`` runs; every value is checked before any work starts."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from flextui.errors import FlextuiError
from flextui.fields import printable
from flextui.limits import DEVICES, FILE_BYTES, RANKS_PER_HOST, read_file, read_json
from flextui.strategy import Strategy


def asked(args: argparse.Namespace):
    """How to train and where, as the options say, every value checked before any work
    (the backend is chosen once the cluster is known)."""
    from flextui.errors import FieldError
    from flextui.fields import FormFields
    from flextui.runtime.datafeed import MAX_DATA_WORKERS
    from flextui.runtime.hosts import parse_host_list, read_hostfile
    from flextui.runtime.spec import Training
    from flextui.runtime.target import LaunchTarget, Remote
    from flextui.search.options import parse_whole
    from flextui.strategy import BUILTIN_STRATEGIES

    form = FormFields()
    try:
        for flag in ("cluster", "run_log", "hostfile", "remote_python", "data", "log_dir",
                     "save", "resume"):
            if getattr(args, flag) is not None:
                form.path(getattr(args, flag), flag)
        if args.strategy not in BUILTIN_STRATEGIES:
            form.path(args.strategy, "strategy")
        if args.nproc_per_node is not None:
            parse_whole("nproc_per_node", args.nproc_per_node, 1, RANKS_PER_HOST.value)
        form.integer(args.data_workers, "data_workers", 0, MAX_DATA_WORKERS)
        form.integer(args.eval_every, "eval_every", 0)
        if args.epochs is not None:
            form.integer(args.epochs, "epochs", 1)
        training = Training(steps=args.steps, warmup=args.warmup, seed=args.seed, lr=args.lr,
                            check=args.check, record_tasks=args.record_profile,
                            **_update_asked(args))
        hosts = read_hostfile(args.hostfile) if args.hostfile else \
            parse_host_list(args.hosts) if args.hosts is not None else []
        remote = Remote.choose(args.ssh, args.remote_python) \
            if hosts or args.ssh or args.remote_python else None
        return training, LaunchTarget(tuple(hosts), remote, args.port)
    except FieldError as e:
        raise FlextuiError(e.flag_message) from None


def training_args(p: argparse.ArgumentParser) -> None:
    """The options of the update and the precision a launch trains with."""
    from flextui.cli.common import names_of, optimizer_arg
    from flextui.runtime.optimizer import LrSchedule
    from flextui.runtime.spec import PRECISIONS

    optimizer_arg(p)
    p.add_argument("--momentum", type=float, metavar="M",
                   help="SGD's momentum (default 0.9)")
    p.add_argument("--weight-decay", type=float, default=0.0, metavar="WD",
                   help="SGD's L2 penalty, AdamW's decoupled decay (default 0)")
    p.add_argument("--betas", metavar="B1,B2",
                   help="AdamW's moving averages' decays (default 0.9,0.999)")
    p.add_argument("--eps", type=float, help="AdamW's epsilon (default 1e-8)")
    p.add_argument("--lr-schedule", choices=names_of(LrSchedule),
                   default=LrSchedule.CONSTANT.value,
                   help="the learning rate after the warm-up: constant, or down to 0 at the "
                   "last step linearly or along half a cosine (default constant)")
    p.add_argument("--warmup-steps", type=int, default=0, metavar="N",
                   help="the learning rate rises linearly from 0 over the first N steps "
                   "(default 0)")
    p.add_argument("--grad-clip", type=float, metavar="NORM",
                   help="clip the gradients' global norm (all parameters of all ranks) to "
                   "NORM, as torch.nn.utils.clip_grad_norm_")
    p.add_argument("--precision", choices=tuple(PRECISIONS),
                   help="what the ranks train in: fp32 or fp64 throughout, or bf16 mixed "
                   "precision (ops in bfloat16, float32 master weights) (default: the "
                   "strategy's, fp32 unless its file says \"precision\": \"bf16\"; "
                   "--check runs fp64, a bf16 strategy's ops in bf16; --dtype stays the "
                   "profiles' dtype)")


def precision_asked(args: argparse.Namespace, strategy: Strategy) -> Strategy:
    """``strategy`` in the precision ``--precision`` asks for (bf16: mixed; fp32 and
    fp64: throughout), or as it is without the option."""
    from flextui.runtime.spec import PRECISIONS
    if args.precision is None:
        return strategy
    return strategy.with_precision(PRECISIONS[args.precision][1])


def _update_asked(args: argparse.Namespace) -> dict:
    """The Training fields of the update and precision options (their ranges are
    checked by Training); an option of the other optimizer is refused."""
    from flextui.cost.optimizers import OptimizerKind
    from flextui.runtime.optimizer import LrSchedule
    from flextui.runtime.spec import PRECISIONS

    adamw = args.optimizer == OptimizerKind.ADAMW
    other = [flag for flag, given in (("--momentum", adamw and args.momentum is not None),
                                      ("--betas", not adamw and args.betas is not None),
                                      ("--eps", not adamw and args.eps is not None)) if given]
    if other:
        raise FlextuiError(f"{other[0]} is not an option of --optimizer {args.optimizer}: "
                           f"leave it out, or give --optimizer "
                           f"{'sgd' if adamw else 'adamw'}")
    asked = {"optimizer": OptimizerKind(args.optimizer), "weight_decay": args.weight_decay,
             "lr_schedule": LrSchedule(args.lr_schedule), "warmup_steps": args.warmup_steps,
             "grad_clip": args.grad_clip, "dtype": PRECISIONS[args.precision or "fp32"][0]}
    if args.momentum is not None:
        asked["momentum"] = args.momentum
    if args.eps is not None:
        asked["eps"] = args.eps
    if args.betas is not None:
        parts = args.betas.split(",")
        try:
            asked["betas"] = tuple(float(b) for b in parts)
        except ValueError:
            parts = []
        if len(parts) != 2:
            raise FlextuiError(f"--betas takes two numbers B1,B2 (e.g. 0.9,0.999), found "
                               f"{printable(args.betas)!r}")
    return asked


def launch_cluster(args: argparse.Namespace, training, hosts):
    """The launch's devices: --cluster, else this machine's GPUs, else CPU processes
    (as many as the strategy file was made for, --nproc-per-node, or 2, a core each);
    over hosts without --cluster, CPU processes on each (their slots, --nproc-per-node,
    or 2). Counts are checked before the cluster is built."""
    from flextui.machine import load_named_cluster
    from flextui.machine.detect import cpu_ranks, detect_local, usable_cpus
    from flextui.runtime.target import check_ranks_fit

    if hosts and not args.cluster:
        slots = {h.slots for h in hosts if h.slots is not None} | \
            ({args.nproc_per_node} if args.nproc_per_node else set())
        if len(slots) > 1:
            raise FlextuiError(f"the hosts ask for different numbers of ranks ({sorted(slots)})"
                               ": give --cluster with a node of that many devices per host")
        ranks = slots.pop() if slots else 2
        problem = DEVICES.problem(ranks * len(hosts))
        if problem:
            raise FlextuiError(f"{len(hosts):,} hosts of {ranks:,} ranks: {problem}")
        return cpu_ranks(ranks, nodes=len(hosts))
    name = args.cluster or _file_cluster(args.strategy)
    if name is not None:
        cluster = load_named_cluster(name)
        if args.nproc_per_node is not None and args.nproc_per_node != cluster.num_devices:
            raise FlextuiError(f"--nproc-per-node {args.nproc_per_node}, but cluster "
                               f"{cluster.name!r} has {cluster.num_devices} devices")
        return cluster
    local = detect_local()
    if not local.devices[0].spec.is_cpu:
        if args.nproc_per_node not in (None, local.num_devices):
            raise FlextuiError(f"--nproc-per-node {args.nproc_per_node}: a launch uses all "
                               f"{local.num_devices} GPUs of this machine (set "
                               "CUDA_VISIBLE_DEVICES to use fewer)")
        return local
    ranks = args.nproc_per_node or 2
    check_ranks_fit("this machine", ranks, training, 0, usable_cpus())
    return cpu_ranks(ranks)


def _file_cluster(strategy: str) -> str | None:
    """The cluster a strategy file was made for, when it is this machine's CPU
    processes or GPUs (``local-cpu-N``, ``local``): the launch runs it as it is."""
    path = Path(strategy)
    if path.suffix != ".json" or not path.is_file():
        return None
    try:  # within the limits (size, nesting) loading the strategy will check
        name = read_json(read_file(path, FILE_BYTES).decode(), str(path)).get("cluster")
    except (OSError, ValueError, AttributeError, FlextuiError):
        return None  # loading the strategy says what is wrong with the file
    return name if isinstance(name, str) and re.fullmatch(r"local(-cpu-\d{1,5})?", name) \
        else None


def beside_strategy(strategy: str, graph, cluster) -> Path | None:
    """A new run log next to the strategy file launched (None: the default, here)."""
    from flextui.runtime.job import RUN_SUFFIX
    from flextui.search.files import default_log_path

    path = Path(strategy)
    if not path.is_file():
        return None
    return default_log_path(graph, cluster, path.parent, suffix=RUN_SUFFIX)


def check_graph(args: argparse.Namespace, graph, strategy, devices: int):
    """The model at the smallest batch the strategy divides (the same strategy, op by
    op), so a check is quick."""
    from flextui.cli.common import model_options
    from flextui.graph.library import load_model
    from flextui.runtime.job import check_batch

    batch = check_batch(graph, strategy)
    if batch == graph.batch_size:
        return graph
    options = {**model_options(args, devices), "batch_size": batch}
    return load_model(graph.source, **options)
