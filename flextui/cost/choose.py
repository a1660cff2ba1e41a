"""Choosing the cost model a simulation or search uses: the analytic model, or what was
measured for the cluster's device kind: task times from its profile cache and, where
``flextui profile --comm`` calibrated its links, communication times.

Profiles are looked up by what the cluster simulates, not by the machine flextui runs
on: a laptop can simulate an H100 cluster from profiles measured on an H100 login node
(and merged into its cache, or shipped as reference profiles). CPU devices (``cpu``,
``cpu-rank``) use the CPU profiles measured with the threads a launch's rank computes
with (``machine.detect.rank_threads``; ``cost.cpu_threads``), and the loopback link
between CPU ranks the calibration ``flextui profile --comm --device cpu`` measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from flextui.cost.analytic import AnalyticCostModel
from flextui.cost.cache import BadDocument, ProfileCache, decode_cache, device_kind_slug
from flextui.cost.cache_dirs import in_run_profile_dir, reference_profile_dir, user_profile_dir
from flextui.cost.calibrated import CalibratedCommModel
from flextui.cost.calibration import (
    SUFFIX as CALIBRATION_SUFFIX,
    CommCalibration,
    read_calibrations,
)
from flextui.cost.cpu_threads import threads_of
from flextui.cost.mathmode import measurement_now
from flextui.cost.model import CostModel
from flextui.cost.signatures import DTYPE_NAMES
from flextui.errors import FlextuiError
from flextui.graph import OpGraph
from flextui.limits import LimitError, read_file
from flextui.machine import Cluster
from flextui.machine.cpus import is_cpu
from flextui.machine.detect import rank_threads
from flextui.machine.gpus import same_device_kind


class CostKind(StrEnum):
    """Where a simulation's task times come from."""

    ANALYTIC = "analytic"   # the roofline model
    PROFILED = "profiled"   # measured alone by flextui profile, analytic where missing
    RECORDED = "recorded"   # measured in a launch (--record-profile), analytic where missing
    AUTO = "auto"           # profiled where the profiler measured the devices, else analytic


@dataclass
class CostChoice:
    model: CostModel
    notices: list[str] = field(default_factory=list)


def profile_files(dirs: list[Path]) -> tuple[dict[str, Path], list[str]]:
    """Device name -> the first usable profile file for it in ``dirs`` (user first), and
    a notice for each file that cannot be used (corrupt, truncated, from a newer flextui,
    or named for another device kind): each such file is opened as its device kind's
    cache, as ``flextui profile`` opens it, so it is reported the same way and the user's
    own is moved aside."""
    found: dict[str, Path] = {}
    notices: list[str] = []
    bad_kinds: list[str] = []
    for d in dirs:
        for path in sorted(d.glob("*.msgpack")) if d.is_dir() else []:
            if path.name.endswith(CALIBRATION_SUFFIX):
                continue
            if device_kind_slug(path.stem) != path.stem:
                notices.append(f"{path}: not a profile cache's name (<device-kind>.msgpack, "
                               f"e.g. {device_kind_slug(path.stem)}.msgpack); ignored")
                continue
            try:
                name = decode_cache(read_file(path, None), path.stem).device_name
            except (OSError, BadDocument, LimitError):
                bad_kinds.append(path.stem)
                continue
            found.setdefault(name, path)
    for kind in dict.fromkeys(bad_kinds):
        notices += ProfileCache(kind, dirs).notices
    return found, notices


def choose_cost_model(graph: OpGraph, cluster: Cluster, cost: CostKind | str = CostKind.ANALYTIC, *,
                      profiles: str | None = None, dtype: str = "fp32",
                      training: bool = True) -> CostChoice:
    """The cost model ``cost`` names for simulating ``graph`` on ``cluster``. "profiled"
    needs what ``flextui profile`` measured of one of the cluster's device kinds with
    this torch, "recorded" what launches recorded (``--record-profile``: the in-run
    subdirectory, kept apart), the profiler's times where no launch ran a task; each
    says how many of the search's tasks they cover;
    "auto" is "profiled" where such profiles exist and the analytic model otherwise,
    saying which. Every profile file that cannot be used is named, in the notices or in
    the error."""
    if cost not in tuple(CostKind):
        raise FlextuiError(f"--cost {cost!r:.40}: choose {' or '.join(CostKind)}")
    if cost == CostKind.ANALYTIC:
        return CostChoice(AnalyticCostModel())
    if dtype not in DTYPE_NAMES:
        raise FlextuiError(f"--dtype {dtype!r}: choose one of {', '.join(DTYPE_NAMES)}")
    recorded = cost == CostKind.RECORDED
    dirs = [user_profile_dir(profiles), reference_profile_dir()]
    in_run = in_run_profile_dir(profiles) if recorded else None
    # recorded: what launches recorded first, then what the profiler measured alone
    choice, problem = _measured(graph, cluster, [in_run, *dirs] if in_run else dirs, dtype,
                                training, needs=in_run)
    if choice is not None:
        return choice
    if cost == CostKind.AUTO:
        return CostChoice(AnalyticCostModel(), [f"analytic cost model: {problem}"])
    how = ("record them with `flextui launch --record-profile` on such devices" if recorded
           else "measure them with `flextui profile --model ...` on such a device")
    raise FlextuiError(f"{problem}; {how}, or use --cost analytic")


def _measured(graph: OpGraph, cluster: Cluster, dirs: list[Path], dtype: str,
              training: bool, needs: Path | None = None) -> tuple[CostChoice | None, str]:
    """The profiled cost model from the first profiles in ``dirs`` of one of the
    cluster's device kinds whose file lies in ``needs`` (the first of ``dirs``) when it
    is given, or None and what was not found."""
    import torch  # imported here, as only profiles need it: their keys carry its version

    from flextui.cost.profiled import ProfiledCostModel
    kinds = sorted({d.spec.kind for d in cluster.devices})
    files, problems = profile_files(dirs)
    for kind in kinds:
        for name, path in files.items():
            if same_device_kind(kind, name) and _right_threads(kind, name) \
                    and (needs is None or path.parent == needs):
                cache = ProfileCache(name, dirs)
                measurement = measurement_now(DTYPE_NAMES[dtype], training, name)
                model = ProfiledCostModel.from_cache(graph, cluster.num_devices, cache,
                                                     measurement, AnalyticCostModel())
                if not model.times:
                    continue
                notices = list(dict.fromkeys(problems + cache.notices))
                notices.append(f"profiled cost model: {model.describe()}")
                return with_calibrations(CostChoice(model, notices), kind, dirs), ""
    where = str(needs) if needs is not None else " or ".join(str(d) for d in dirs)
    found = [f"{path} holds {name}" for name, path in files.items()
             if needs is None or path.parent == needs] + problems
    if any(map(is_cpu, kinds)):
        kinds = [f"{k} ({_threads_phrase()})" if is_cpu(k) else k for k in kinds]
    return None, (f"no profiles of {', '.join(kinds)} devices for {graph.name} "
                  f"({dtype}, {'training' if training else 'inference'}, torch "
                  f"{torch.__version__}) in {where}"
                  f"{' (' + '; '.join(found) + ')' if found else ''}")


def _right_threads(kind: str, device_name: str) -> bool:
    """Whether profiles of ``device_name`` were measured as a device of ``kind`` computes:
    on a CPU, with the threads of a launch's rank."""
    return not is_cpu(kind) or threads_of(device_name) == rank_threads()


def _threads_phrase() -> str:
    threads = rank_threads()
    return (f"measured with {threads} thread{'s' if threads > 1 else ''}, as a launch's rank "
            "computes (OMP_NUM_THREADS)")


def calibrations_for(kind: str, dirs: list[Path]) -> list[CommCalibration]:
    """The communication calibrations measured on devices of ``kind`` (user dir first;
    one per link kind)."""
    found: dict[str, CommCalibration] = {}
    for d in dirs:
        for path in sorted(d.glob(f"*{CALIBRATION_SUFFIX}")) if d.is_dir() else []:
            for calibration in read_calibrations(path):
                if same_device_kind(kind, calibration.device):
                    found.setdefault(calibration.link_kind, calibration)
    return list(found.values())


def with_calibrations(choice: CostChoice, kind: str, dirs: list[Path]) -> CostChoice:
    """The choice, its communication timed by the calibrations of ``kind``, if any."""
    calibrations = calibrations_for(kind, dirs)
    if not calibrations:
        return choice
    links = ", ".join(f"{c.link_kind} ({c.backend}, {c.world_size} ranks)" for c in calibrations)
    return CostChoice(CalibratedCommModel(choice.model, calibrations),
                      choice.notices + [f"communication calibrated over {links}"])


def measured_figures(cluster: Cluster, profiles: str | None = None) -> dict[str, list[dict]]:
    """What ``--cost profiled`` would take for ``cluster`` from the profile directories
    (``profiles``, else the user's, then the reference profiles): for each device kind,
    the profile file it would read (device name, path, tasks held) and the communication
    calibrations of its link kinds (link kind, backend, ranks, fitted latency and
    bandwidth). Files that cannot be used are left out (``choose_cost_model`` names
    them)."""
    from flextui.cost.calibration import fit_latency_bandwidth
    dirs = [user_profile_dir(profiles), reference_profile_dir()]
    files, _ = profile_files(dirs)
    found: dict[str, list[dict]] = {"profiles": [], "calibrations": []}
    for kind in sorted({d.spec.kind for d in cluster.devices}):
        for name, path in files.items():
            if same_device_kind(kind, name) and _right_threads(kind, name):
                tasks = len(decode_cache(read_file(path, None), path.stem).entries)
                found["profiles"].append({"kind": kind, "device": name, "file": str(path),
                                          "tasks": tasks})
                break
        links = {link.kind for link in cluster.links}
        for calibration in calibrations_for(kind, dirs):
            if calibration.link_kind in links:
                latency, bandwidth = fit_latency_bandwidth(calibration.p2p)
                found["calibrations"].append({
                    "kind": kind, "link_kind": calibration.link_kind,
                    "backend": calibration.backend, "world_size": calibration.world_size,
                    "latency_s": latency, "bandwidth": bandwidth})
    return found
