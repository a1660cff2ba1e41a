"""``flextui launch``'s refusals: everything wrong with what was asked is one message
and exit status 2 before any process starts."""

import socket
import subprocess
import sys
import textwrap

import pytest

from flextui.cli import main


def run(capsys, *argv):
    code = main(["launch", *argv])
    out, err = capsys.readouterr()
    return code, " ".join(out.split()), " ".join(err.split())


def test_a_strategy_made_for_another_model_or_batch_is_refused(tmp_path, capsys):
    made = tmp_path / "mlp.json"
    assert main(["show", "-m", "lenet", "-b", "32", "--strategy", "data-parallel",
                 "--cluster", "local-cpu-2", "--export", str(made)]) == 0
    code, _, err = run(capsys, "-m", "lenet", "-b", "16", "--strategy", str(made))
    assert code == 2 and "was made for another graph" in err and "batch 16" in err


def test_a_strategy_for_more_devices_than_the_launch_has_names_both(tmp_path, capsys):
    made = tmp_path / "sixteen.json"
    assert main(["show", "-m", "lenet", "--strategy", "data-parallel", "--cluster",
                 "p100-4x4", "--export", str(made)]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, "-m", "lenet", "--strategy", str(made), "--nproc-per-node", "2")
    assert code == 2 and "made for 16 devices" in err and "this launch has 2" in err
    assert "--cluster local-cpu-2" in err


def test_a_busy_port_is_refused(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, _, err = run(capsys, "-m", "lenet", "--port", str(port))
    assert code == 2 and f"port {port} is in use" in err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without GPU")
def test_nccl_without_a_gpu_is_refused(capsys):
    code, _, err = run(capsys, "-m", "lenet", "--backend", "nccl")
    assert code == 2 and "--backend nccl needs a GPU per rank" in err


def test_no_torchrun_is_one_message(capsys, monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch.distributed.run"
                        else real(name, *a))
    code, _, err = run(capsys, "-m", "lenet")
    assert code == 2 and "torchrun (torch.distributed.run) is missing" in err


def test_bad_numbers_are_refused(capsys):
    assert run(capsys, "-m", "lenet", "--steps", "0")[0] == 2
    assert run(capsys, "-m", "lenet", "--nproc-per-node", "0")[0] == 2


def test_a_dry_run_prints_the_torchrun_command_and_starts_nothing(capsys):
    code, out, _ = run(capsys, "-m", "lenet", "--nproc-per-node", "4", "--dry-run")
    assert code == 0
    for part in ("-m torch.distributed.run", "--nproc-per-node 4", "--rdzv-backend c10d",
                 "--max-restarts 0", "-m flextui.runtime.worker", "FLEXTUI_LAUNCHER_PID=",
                 "OMP_NUM_THREADS="):
        assert part in out, part


def test_a_failure_quoting_brackets_is_printed_as_said(tmp_path, capsys, monkeypatch):
    """A failed rank's last line is quoted in the message; gloo's errors name their source
    as [path:line], which Rich took for a closing tag (MarkupError, a traceback, no
    message) whenever that line was the last."""
    from flextui.cli import launch as cli_launch
    from flextui.runtime import job
    from flextui.runtime.launch import Outcome, RunStatus

    said = ("rank 0 on localhost failed: RuntimeError: [/__w/pytorch/pytorch/third_party/"
            "gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    monkeypatch.setattr(job, "execute", lambda *a, **k: (
        Outcome(RunStatus.FAILED, 1, 0, said, 1.0), None, []))
    monkeypatch.setattr(cli_launch, "print_summary", lambda summary, console: None)
    monkeypatch.setenv("COLUMNS", "1000")
    code = main(["launch", "-m", "lenet", "--nproc-per-node", "2",
                 "--run-log", str(tmp_path / "run.ffrun")])
    out, err = capsys.readouterr()
    assert code == 1 and said in out and "Traceback" not in err


def test_ctrl_c_while_starting_up_is_a_clean_exit(tmp_path):
    """SIGINT while `flextui launch` imports what it needs (its options name the built-in
    strategies): "interrupted" and exit status 130, not a KeyboardInterrupt traceback."""
    code = textwrap.dedent("""
        import os, runpy, signal, sys

        class CtrlC:   # Ctrl-C, as the strategies start to be imported
            def find_spec(self, name, path=None, target=None):
                if name == "flextui.strategy":
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), signal.SIGINT)

        sys.meta_path.insert(0, CtrlC())
        sys.argv = ["flextui", "launch", "-m", "lenet", "--headless", "--dry-run"]
        runpy.run_module("flextui", run_name="__main__")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 130 and done.stderr == "flextui: interrupted\n", done.stderr
