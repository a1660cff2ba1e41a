"""Files people and other machines hand flextui, through the command line: a name that
carries a terminal escape (a window title, the clipboard, a cleared screen) is refused
where the file is read, in one message that shows it escaped, and nothing raw reaches
the terminal; a "file" that is a FIFO or a device, or too big, is refused before it is
read; what a strategy file says it was made for is checked; a figure that would
overflow a simulation is refused, and --json output is always JSON; a search log that
contradicts itself is refused."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zlib

import msgpack
import pytest

from flextui.cli import main
from flextui.cli.common import emit_json
from flextui.errors import FlextuiError
from helpers import HANG_S, TWO_CPUS_CLUSTER, edit_log_header

#: a window title, the clipboard (OSC 52) and a cleared screen
ESCAPES = ["\x1b]0;pwned\x07", "\x1b]52;c;cHduZWQ=\x07", "\x1b[2J"]
RAW = ("\x1b", "\x07", "\x9b")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys, argv, *fragments):
    """``argv`` exits 2 with one line naming each of ``fragments``, and nothing raw."""
    code, out, err = run(capsys, *argv)
    assert code == 2, (argv, out, err)
    assert not any(c in out + err for c in RAW), repr(out + err)
    assert err.count("\n") == 1 and "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# -- names in strategy files ----------------------------------------------------------


@pytest.fixture
def dp_json(capsys, tmp_path):
    """lenet's data-parallel strategy on local-cpu-4, as a file's data."""
    path = tmp_path / "dp.json"
    assert run(capsys, "show", "-m", "lenet", "-c", "local-cpu-4", "-s", "data-parallel",
               "--export", path)[0] == 0
    return json.loads(path.read_text())


def _rename_op(data, old, new):
    data["ops"][new] = data["ops"].pop(old)


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("edit, field", [
    (lambda d, e: d.update(name="best" + e), "name"),
    (lambda d, e: _rename_op(d, "fc1", "fc1" + e), "ops"),
    (lambda d, e: d.update(model="lenet" + e), "model"),
    (lambda d, e: d.update(cluster="local" + e), "cluster"),
], ids=["name", "op", "model", "cluster"])
def test_a_strategy_file_with_an_escape_in_a_name_is_refused(capsys, tmp_path, dp_json, escape,
                                                             edit, field):
    edit(dp_json, escape)
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(dp_json))
    for command in ("show", "simulate"):
        refused(capsys, [command, "-m", "lenet", "-c", "local-cpu-4", "-s", path],
                f"{path}: {field}", "control character '\\x1b'")


# -- names in cluster files -----------------------------------------------------------

PLACES = ("name", "description", "kind", "device", "link")


def toml_string(text: str) -> str:
    """``text`` inside a TOML basic string: control characters as \\uXXXX escapes."""
    return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 else c
                   for c in text)


def cluster_file(tmp_path, **escapes) -> str:
    path = tmp_path / "two.toml"
    names = {p: toml_string(escapes.get(p, "")) for p in PLACES}
    path.write_text(TWO_CPUS_CLUSTER.format(**names))
    return path


def test_the_cluster_file_used_here_is_fine(capsys, tmp_path):
    code, out, _ = run(capsys, "simulate", "-m", "lenet", "-c", cluster_file(tmp_path), "--json")
    assert code == 0 and json.loads(out)["cluster"] == "two"


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("place, field", [
    ("name", "name"), ("description", "description"), ("kind", "device_kinds"),
    ("device", "devices[0].name"), ("link", "links[0].kind")])
def test_a_cluster_file_with_an_escape_in_a_name_is_refused(capsys, tmp_path, escape, place,
                                                            field):
    path = cluster_file(tmp_path, **{place: escape})
    for argv in (["simulate", "-m", "lenet", "-c", path],
                 ["show", "-m", "lenet", "-c", path, "-s", "data-parallel"]):
        refused(capsys, argv, f"{path}: {field}", "control character '\\x1b'")


@pytest.mark.parametrize("argv", [["runs", "show", "a.ffrun", "b\x1b[2J"],
                                  ["\x1b]0;pwned\x07"], ["show", "--limit", "\x1b[2J"]])
def test_a_command_line_error_shows_what_was_typed_escaped(capsys, argv):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "error: " in err and "\\x1b" in err
    assert not any(c in err for c in RAW), repr(err)


@pytest.mark.parametrize("argv, flag", [
    (["replay", "--headless", "LOG", "--export-strategy", "x{}.json"], "--export-strategy"),
    (["replay", "--headless", "LOG", "--trace", "x{}.json"], "--trace"),
    (["show", "-m", "lenet", "--export", "x{}.json"], "--export"),
    (["runs", "show", "x{}.ffrun"], "log"),
    (["search", "-m", "lenet", "--budget", "5", "--out", "x{}.ffsearch"], "--out")])
def test_a_path_typed_with_an_escape_is_refused_before_it_is_shown(capsys, lenet_log, argv,
                                                                   flag):
    """A path is shown back (where a strategy or a trace was written): one holding a
    control character is refused before the command runs."""
    argv = [str(lenet_log) if a == "LOG" else a.format(ESCAPES[0]) for a in argv]
    refused(capsys, argv, f"{flag} 'x\\x1b]0;pwned\\x07", "holds the control character")


def test_an_unknown_key_with_an_escape_is_shown_escaped(capsys, tmp_path):
    path = cluster_file(tmp_path)
    path.write_text(f'"{toml_string(ESCAPES[2])}" = 1\n' + path.read_text())
    refused(capsys, ["simulate", "-m", "lenet", "-c", path], "unknown key '\\x1b[2J'")


# -- names in search logs -------------------------------------------------------------


def _graph_hash(graph: dict) -> str:
    """``OpGraph.fingerprint`` of the graph's data, as a hand that edits a log works it
    out again (flextui cannot build the graph to ask it)."""
    text = json.dumps(graph, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cluster_hash(cluster: dict) -> str:
    text = json.dumps(cluster, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _rename_graph_op(header, escape):
    ops = header["graph"]["ops"]
    old = ops[1]["name"]
    ops[1]["name"] += escape
    for op in ops:
        op["inputs"] = [name.replace(f"{old}:", f"{old}{escape}:") for name in op["inputs"]]


def _rename_device(header, escape):
    cluster = header["cluster"]
    old = cluster["devices"][0]["name"]
    cluster["devices"][0]["name"] = new = old + escape
    for link in cluster["links"]:
        for key in ("src", "dst"):
            link[key] = new if link[key] == old else link[key]
        link["name"] = f"{link['src']}->{link['dst']}"


def _profiled(base: str) -> str:
    """A profiled cost model's identity over the cost model ``base`` names (its JSON
    writes a control character as an escape, which reading it turns back)."""
    from flextui.cost.profiled import IDENTITY_PREFIX
    table = base64.b64encode(zlib.compress(msgpack.packb([]))).decode()
    return IDENTITY_PREFIX + json.dumps({"base": base, "device": "cpu: x", "dtype": "float32",
                                         "training": True, "torch": "2", "times": table})


@pytest.mark.parametrize("escape", ESCAPES)
@pytest.mark.parametrize("edit, fragment", [
    (_rename_graph_op, "an op's name"),
    (lambda h, e: h["graph"].update(name="lenet" + e), "a graph's name"),
    (lambda h, e: h["graph"]["meta"].update(model="lenet" + e), "meta model"),
    (lambda h, e: h["cluster"].update(name="p100" + e), "cluster name"),
    (_rename_device, "device name"),
    (lambda h, e: h["cluster"]["links"][0].update(kind="nvlink" + e), "kind 'nvlink"),
    (lambda h, e: h.update(created="2024" + e), "header created"),
    (lambda h, e: h.update(flextui="0.1" + e), "header flextui version"),
    (lambda h, e: h.update(cost_model="mine" + e), "header cost_model"),
    (lambda h, e: h.update(cost_model=_profiled("mine" + e)), "base"),
], ids=["op", "graph", "model", "cluster", "device", "link", "created", "version",
        "cost-model", "profiled-base"])
def test_a_search_log_with_an_escape_in_its_header_is_refused(capsys, tmp_path, lenet_log,
                                                              escape, edit, fragment):
    log = tmp_path / "evil.ffsearch"
    shutil.copy(lenet_log, log)

    def evil(header):
        edit(header, escape)
        header["graph_hash"] = _graph_hash(header["graph"])
        header["cluster_hash"] = _cluster_hash(header["cluster"])
    edit_log_header(log, evil)
    for argv in (["replay", log, "--headless"], ["replay", log, "--json"],
                 ["search", "--resume", log]):
        refused(capsys, argv, str(log), "record 0", fragment, "control character '\\x1b'")


def rewrite_final(source, log, edit):
    """Copy the finished log ``source`` to ``log`` with its final record changed by
    ``edit(record)``, framed again (checksums redone)."""
    from flextui.search import read_search_log
    from flextui.search.logformat import FRAME, TAG_FINAL, frame
    data = source.read_bytes()
    final_at = read_search_log(source).record_offsets[-1]
    record = msgpack.unpackb(data[final_at + FRAME.size:], raw=False)
    assert record[0] == TAG_FINAL
    edit(record)
    log.write_bytes(data[:final_at] + frame(msgpack.packb(record, use_bin_type=True)))


def test_a_strategy_name_in_a_search_log_with_an_escape_is_refused(capsys, tmp_path,
                                                                   lenet_log):
    log = tmp_path / "evil.ffsearch"
    rewrite_final(lenet_log, log, lambda record: record[5].__setitem__(0, "best" + ESCAPES[0]))
    refused(capsys, ["replay", log, "--headless"], "final best strategy name",
            "control character '\\x1b'")


# -- names in profile caches: `flextui clusters` --------------------------------------


def test_a_profile_cache_with_an_escape_in_its_device_name_is_never_shown(capsys, tmp_path,
                                                                          monkeypatch):
    from flextui.cost.cache import encode_cache
    from flextui.cost.cache_records import device_kind_slug
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    name = f"cpu: Evil{ESCAPES[0]}CPU, 1 thread"
    (tmp_path / f"{device_kind_slug(name)}.msgpack").write_bytes(encode_cache(name, {}))
    code, out, err = run(capsys, "clusters", "--detect", "--cpu-ranks", "2", "--profiles",
                         tmp_path)
    assert code == 0 and "local-cpu-2" in out
    assert not any(c in out + err for c in RAW), repr(out + err)
    assert "task times: estimated" in out


# -- rich markup in names -------------------------------------------------------------


def test_markup_in_names_is_shown_as_written(capsys, tmp_path, dp_json):
    dp_json["name"] = "[/]best[bold]"
    _rename_op(dp_json, "fc1", "fc1[/x]")
    path = tmp_path / "marked.json"
    path.write_text(json.dumps(dp_json))
    for command in ("show", "simulate"):
        code, out, err = run(capsys, command, "-m", "lenet", "-c", "local-cpu-4", "-s", path)
        assert code == 2 and "has no op 'fc1[/x]'" in err   # not lenet's op: refused
    _rename_op(dp_json, "fc1[/x]", "fc1")
    path.write_text(json.dumps(dp_json))
    for command in ("show", "simulate"):
        code, out, err = run(capsys, command, "-m", "lenet", "-c", "local-cpu-4", "-s", path)
        assert code == 0 and "[/]best[bold]" in out, (out, err)


# -- what is not a file, or is too big ------------------------------------------------


def _flextui(tmp_path, *argv):
    """``flextui argv`` in a process of its own (a FIFO would block the test's own), with
    HANG_S against a hang; the test asserts what it prints."""
    return subprocess.run([sys.executable, "-m", "flextui", *map(str, argv)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=HANG_S)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero", "directory"])
def test_a_file_that_is_not_a_file_is_refused_unread(tmp_path, kind):
    """A cluster, strategy, search log or host file that is a FIFO (which would wait for
    a writer forever), /dev/zero (which never ends) or a directory."""
    path = tmp_path / "c.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = "/dev/zero" if kind == "dev-zero" else path
        if kind == "link-to-dev-zero":
            path.symlink_to("/dev/zero")
    what = {"fifo": "a FIFO (a named pipe)",
            "directory": "a directory"}.get(kind, "a character device")
    for argv in (["simulate", "-m", "lenet", "-c", path],
                 ["show", "-m", "lenet", "-c", "local-cpu-4", "-s", path],
                 ["replay", path, "--headless"],
                 ["launch", "-m", "lenet", "-c", "local-cpu-2", "--hostfile", path, "--dry-run"],
                 ["runs", "show", path]):
        done = _flextui(tmp_path, *argv)
        assert done.returncode == 2 and f"{path}: {what}, not a regular file" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_strategy_file_nested_thousands_deep_is_refused_by_launch(capsys, tmp_path):
    """launch looks into a strategy file for the cluster it was made for before loading
    it: that look is within the limits too (it raised RecursionError)."""
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    refused(capsys, ["launch", "--dry-run", "-m", "lenet", "-s", path],
            f"{path}: nested deeper than flextui's limit of 32 levels")


def test_a_profile_cache_that_is_a_fifo_is_refused_unread(tmp_path):
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    fifo = profiles / "cpu-some-cpu-1-thread.msgpack"
    os.mkfifo(fifo)
    for argv in (["profile", "--show", fifo],
                 ["clusters", "--detect", "--cpu-ranks", "2", "--profiles", profiles]):
        done = _flextui(tmp_path, *argv)
        assert done.returncode == 2, done
        assert f"{fifo}: a FIFO (a named pipe), not a regular file" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_cluster_file_over_its_size_limit_is_refused_unread(capsys, tmp_path):
    path = cluster_file(tmp_path)
    with open(path, "a") as f:
        f.write(("# " + "x" * 1022 + "\n") * 9 * 1024)   # 9 MiB of comments
    refused(capsys, ["simulate", "-m", "lenet", "-c", path],
            "bytes in a cluster file is over flextui's limit of 8,388,608",
            "regular layout")


# -- what a strategy file says it was made for ----------------------------------------


@pytest.mark.parametrize("edit, message", [
    *[(lambda d, v=v: d.update(devices=v), "devices: expected a whole number >= 1")
      for v in (0, -1, float("nan"), float("inf"))],
    (lambda d: d.update(graph=None), "graph: expected a non-empty string, found None"),
    (lambda d: d.update(graph="0123456789abcdef"), "was made for another graph"),
    (lambda d: d.update(graph="not a fingerprint"), "graph: expected the fingerprint"),
    (lambda d: d.pop("graph"), "does not say which graph it was made for"),
    (lambda d: d.update(devcies=4), "unknown key 'devcies'; did you mean 'devices'"),
    (lambda d: d["ops"]["fc1"].update(device=[0]), "did you mean 'devices'"),
], ids=["devices-0", "devices-1", "devices-nan", "devices-inf", "graph-null",
        "graph-other", "graph-garbage", "graph-missing", "typo", "op-typo"])
def test_show_refuses_a_strategy_file_that_was_not_made_for_this_graph(capsys, tmp_path,
                                                                       dp_json, edit, message):
    edit(dp_json)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dp_json))
    refused(capsys, ["show", "-m", "lenet", "-c", "local-cpu-4", "-s", path], str(path), message)


def test_devices_of_1e400_in_a_strategy_file_is_refused(capsys, tmp_path, dp_json):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dp_json).replace('"devices": 4,', '"devices": 1e400,'))
    assert "1e400" in path.read_text()
    refused(capsys, ["show", "-m", "lenet", "-c", "local-cpu-4", "-s", path],
            "devices: expected a whole number >= 1, found inf")


# -- figures that would overflow a simulation; --json is always JSON ----------------


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("line, value, message", [
    ('latency = "1us"', 'latency = "1e308 s"', "links[0].latency: '1e308 s' is out of range"),
    ('bandwidth = "10 GB/s"', 'bandwidth = "1e-300 B/s"', "links[0].bandwidth"),
    ('peak_flops = { float32 = "1 TFLOPS" }', 'peak_flops = "1e300"', "peak_flops"),
])
def test_a_figure_that_would_overflow_a_simulation_is_refused(capsys, tmp_path, line, value,
                                                              message):
    path = cluster_file(tmp_path)
    path.write_text(path.read_text().replace(line, value, 1))
    refused(capsys, ["simulate", "-m", "lenet", "-c", path, "--json"], message)


def test_simulate_json_holds_null_for_a_rejected_strategys_cost(capsys):
    code, out, _ = run(capsys, "simulate", "-m", "alexnet", "-b", "65536", "-c", "h100-single",
                       "--memory", "reject", "--json")
    data = _strict_json(out)
    assert code == 0 and data["cost_s"] is None and data["memory_penalty_s"] is None
    assert data["overflows"] and data["iteration_s"] > 0


def test_json_output_never_holds_nan(capsys):
    with pytest.raises(FlextuiError, match=r"devices\[1\]\.busy_s is nan"):
        emit_json({"devices": [{"busy_s": 1.0}, {"busy_s": float("nan")}]})
    assert capsys.readouterr().out == ""


# -- search logs that contradict themselves -------------------------------------------


def _append(log, record):
    from flextui.search.logformat import frame
    with open(log, "ab") as f:
        f.write(frame(msgpack.packb(record, use_bin_type=True)))


def test_a_dry_run_with_json_prints_json(capsys):
    code, out, err = run(capsys, "launch", "--dry-run", "-m", "lenet", "-c", "local-cpu-2",
                         "--json")
    shown = json.loads(out)
    assert code == 0 and shown["ranks"] == 2 and shown["backend"] == "gloo"
    assert shown["commands"][0][-1].endswith("plan.msgpack") and shown["environment"]


def test_a_negative_cost_in_a_search_log_is_refused(capsys, tmp_path, lenet_log):
    log = tmp_path / "bad.ffsearch"
    rewrite_final(lenet_log, log, lambda record: record.__setitem__(4, -1.0))  # best cost
    for argv in (["replay", log, "--headless"], ["replay", log, "--json"]):
        refused(capsys, argv, str(log), "final best cost: expected a number >= 0, found -1.0")


def test_steps_after_the_final_record_are_refused(capsys, tmp_path, lenet_log):
    from flextui.search import read_search_log
    log = tmp_path / "bad.ffsearch"
    shutil.copy(lenet_log, log)
    whole = read_search_log(lenet_log)
    last = whole.steps[-1]
    _append(log, [1, last.chain, last.iteration + 1, last.elapsed, last.op,
                  [list(last.config.degrees), list(last.config.devices)], last.proposed,
                  None, None, False, last.memory])
    n = len(whole.record_offsets)
    for argv in (["replay", log, "--headless"], ["replay", log, "--json"],
                 ["search", "--resume", log]):
        refused(capsys, argv, f"{log}: record {n} at byte", "after the final record")
