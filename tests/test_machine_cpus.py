"""Whether a device is a CPU is one function (``machine.cpus.is_cpu``, and
``DeviceSpec.is_cpu`` for a cluster's devices): every layer that asks agrees, for both
CPU kinds and for the names of what was measured on a CPU."""

import ast
from pathlib import Path

import pytest

from flextui.cost.choose import _right_threads
from flextui.cost.cpu_threads import threads_of, with_threads
from flextui.cost.mathmode import fp32_math
from flextui.machine import DeviceSpec
from flextui.machine.cpus import CPU_NAME_PREFIX, CpuKind, is_cpu
from flextui.machine.detect import _cpu_cluster, cpu_ranks, rank_threads
from flextui.machine.gpus import same_device_kind
from flextui.runtime.job import choose_backend
from flextui.runtime.spec import Backend
from flextui.session.choices import gpu_count
from helpers import line_cluster

ROOT = Path(__file__).resolve().parents[1] / "flextui"
CPU_PROFILE = with_threads(CPU_NAME_PREFIX + "Test CPU @ 2.5GHz", 2)
KINDS = [(kind.value, True) for kind in CpuKind] + \
    [("P100", False), ("A100-SXM4-80GB", False), ("H100-SXM", False), ("gpu", False)]


@pytest.mark.parametrize("kind, cpu", KINDS)
def test_every_layer_that_asks_whether_a_device_is_a_cpu_agrees(kind, cpu):
    cluster = line_cluster(2, spec=DeviceSpec(kind, 2**30, {"float32": 1e12}, 1e11))
    assert cluster.devices[0].spec.is_cpu is cpu is is_cpu(kind)
    assert gpu_count(cluster) == (0 if cpu else 2)                   # session
    assert choose_backend(cluster, on_hosts=True) == \
        (Backend.GLOO if cpu else Backend.NCCL)                       # runtime
    assert same_device_kind(kind, CPU_PROFILE) is cpu                 # cost: profiles
    assert same_device_kind(kind, CpuKind.MACHINE) is cpu             # and calibrations
    assert not same_device_kind(kind, "NVIDIA H100 80GB HBM3") or not cpu
    right = with_threads(CPU_NAME_PREFIX + "Test CPU", rank_threads())
    wrong = with_threads(CPU_NAME_PREFIX + "Test CPU", rank_threads() + 1)
    assert (_right_threads(kind, right), _right_threads(kind, wrong)) == (True, not cpu)


def test_the_cpu_clusters_flextui_makes_are_cpus():
    assert all(d.spec.is_cpu for d in _cpu_cluster().devices)
    assert all(d.spec.is_cpu for d in cpu_ranks(3).devices)
    assert all(d.spec.is_cpu for d in cpu_ranks(2, nodes=2).devices)


@pytest.mark.parametrize("name, cpu", [
    (CPU_PROFILE, True), (CPU_NAME_PREFIX + "Test CPU", True), ("cpu", True),
    ("NVIDIA H100 80GB HBM3", False), ("Tesla P100-SXM2-16GB", False)])
def test_what_was_measured_on_a_cpu_is_named_as_a_cpus(name, cpu):
    assert is_cpu(name) is cpu
    assert (fp32_math("float32", name) == "") is cpu     # no TF32 math mode on a CPU
    assert threads_of(name) == (2 if name == CPU_PROFILE else None)


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _cpu_checks(source: str) -> list[int]:
    """Lines that ask whether a device is a CPU by its text: a CPU kind written out, a
    ``kind`` compared with "cpu", a name's start compared with "cpu"."""
    tree = ast.parse(source)
    skip = _docstrings(tree)

    def texts(node: ast.AST) -> set[str]:
        return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                and isinstance(n.value, str) and id(n) not in skip}

    def is_kind(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id.lower().endswith("kind")) or \
            (isinstance(node, ast.Attribute) and node.attr == "kind")

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == CpuKind.RANK and id(node) not in skip:
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(map(is_kind, [node.left, *node.comparators])) \
                and CpuKind.MACHINE in set().union(*map(texts, node.comparators), texts(node.left)):
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "startswith" and \
                any(t.startswith("cpu") for arg in node.args for t in texts(arg)):
            found.append(node.lineno)
    return sorted(found)


def test_nothing_but_machine_cpus_asks_by_the_text():
    places = [f"{path.relative_to(ROOT)}:{line}" for path in sorted(ROOT.rglob("*.py"))
              if path != ROOT / "machine" / "cpus.py"
              for line in _cpu_checks(path.read_text())]
    assert places == []


def test_the_check_finds_a_cpu_asked_by_its_text():
    source = ('"""cpu-rank devices"""\n'
              'gpu = spec.kind not in ("cpu", "cpu-rank")\n'
              'n = sum(d.kind != "cpu" for d in devices)\n'
              'cpu = name.startswith("cpu")\n'
              'torch_cpu = device_type == "cpu"\n')
    assert _cpu_checks(source) == [2, 2, 3, 4]


@pytest.mark.parametrize("flags, flop", [("fpu sse sse2 avx fma avx2 avx512f", 32),
                                         ("fpu sse sse2 avx", 16), ("fpu sse sse2", 8),
                                         ("fpu", 16), (None, 16)])
def test_a_cpus_peak_counts_the_flop_its_vector_units_do_a_cycle(tmp_path, monkeypatch,
                                                                   flags, flop):
    from flextui.machine import detect

    cpuinfo = tmp_path / "cpuinfo"
    if flags is not None:
        cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\n"
                           f"processor\t: 1\nflags\t\t: {flags}\n")
    monkeypatch.setattr(detect, "CPUINFO", str(cpuinfo))
    detect.cpu_flop_per_cycle.cache_clear()
    try:
        spec = cpu_ranks(2).devices[0].spec
        assert spec.peak_flops["float32"] == rank_threads() * 2.5e9 * flop
        assert f"2.5 GHz x {flop} FLOP/cycle" in cpu_ranks(2).description
    finally:
        detect.cpu_flop_per_cycle.cache_clear()


@pytest.mark.parametrize("threads", [1, 3])
def test_a_cpu_profile_is_compared_with_the_peak_of_the_threads_it_was_measured_with(threads):
    from flextui.cost.compare import reference_device
    from flextui.cost.localdevice import cpu_name
    from flextui.machine.detect import cpu_flop_per_cycle

    device = reference_device(cpu_name(threads))
    assert is_cpu(device.spec.kind)
    assert device.spec.peak_flops == {"float32": threads * 2.5e9 * cpu_flop_per_cycle()}
