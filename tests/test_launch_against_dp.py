"""``flextui launch --against-dp``: data parallelism run after a strategy predicted
faster than it, on the same ranks, and the measured speedup printed beside the
predicted one; a predicted gain measured as a loss is said so."""

import json

import pytest

from flextui.cli import main
from flextui.runtime.launch import RunStatus
from flextui.runtime.runlog import read_run_log
from flextui.session.against_dp import AgainstDataParallel
from flextui.session.launch_watch import LaunchView
from flextui.tui.screens.launch import baseline_line
from helpers import HANG_S
from test_runtime_ranks import end, launch, starts, wait_gone


def test_the_two_speedups_are_data_parallelisms_iteration_over_the_strategys():
    result = AgainstDataParallel.of(0.010, 0.020, 0.015, 0.016)
    assert (result.predicted, result.measured) == (1.5, 0.8)
    assert result.contradicted
    assert result.describe() == ("against data parallelism: predicted 1.50x, measured 0.80x "
                                 "(predicted faster, measured slower)")
    held = AgainstDataParallel.of(0.010, 0.010, 0.015, 0.012)
    assert not held.contradicted and held.describe().endswith("measured 1.20x")
    unrun = AgainstDataParallel.of(0.010, 0.010, 0.015, None)
    assert unrun.measured is None and not unrun.contradicted
    assert unrun.to_dict() == {"predicted_speedup": 1.5, "measured_speedup": None,
                               "contradicted": False}


def test_against_dp_is_refused_with_check(tmp_path, capsys):
    code = main(["launch", "-m", "lenet", "--nproc-per-node", "2", "--check", "--against-dp",
                 "--run-log", str(tmp_path / "never.ffrun")])
    err = capsys.readouterr().err
    assert code == 2 and err == ("flextui: error: --against-dp measures a training run "
                                 "against data parallelism; leave out --check\n")


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_a_strategy_predicted_faster_is_measured_against_data_parallelism(tmp_path):
    """An MLP of big weights at batch 8: data parallelism all-reduces 32 MB of gradients
    a step, the model-parallel strategy none, so it is predicted faster on any CPU."""
    log = tmp_path / "run.ffrun"
    proc = launch(tmp_path, "-m", "mlp", "-b", "8", "-o", "in_features=1024", "-o",
                  "width=2048", "-o", "layers=2", "--nproc-per-node", "2", "--strategy",
                  "model-parallel", "--steps", "3", "--warmup", "1", "--run-log", str(log),
                  "--against-dp", "--json")
    dp_log = None
    try:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, err[-3000:]
        compared = json.loads(out)["against_dp"]
        dp_log = tmp_path / compared["data_parallel_run_log"]
        assert compared["predicted_speedup"] > 1.5 and compared["measured_speedup"] > 0
        assert compared["contradicted"] == (compared["measured_speedup"] < 1)
        run = read_run_log(dp_log)
        assert run.header.spec.strategy.name == "data-parallel"
        assert run.header.spec.num_ranks == 2 and run.final.status == RunStatus.FINISHED
        assert f"predicted {compared['predicted_speedup']:.2f}x, measured " \
               f"{compared['measured_speedup']:.2f}x" in err
    finally:
        pids = [*starts(log).values(), *(starts(dp_log).values() if dp_log else [])]
        end([proc.pid, *pids])
    assert wait_gone(pids) == []


@pytest.mark.slow
@pytest.mark.xdist_group("gloo")
def test_data_parallelism_itself_has_nothing_to_compare(tmp_path):
    log = tmp_path / "run.ffrun"
    proc = launch(tmp_path, "-m", "lenet", "-b", "8", "--nproc-per-node", "2", "--steps", "2",
                  "--warmup", "1", "--run-log", str(log), "--against-dp", "--json")
    try:
        out, err = proc.communicate(timeout=HANG_S)
        assert proc.returncode == 0, err[-3000:]
        assert json.loads(out)["against_dp"] is None
        assert "--against-dp: the strategy is data parallelism; nothing to compare" in err
        assert sorted(p.name for p in tmp_path.glob("*.ffrun")) == ["run.ffrun"]
    finally:
        end([proc.pid, *starts(log).values()])
    assert wait_gone(starts(log).values()) == []


def _view(iteration_s, simulated_s, state="finished"):
    return LaunchView(state, [], [], 10, 10, 1, 1.0, 64 / iteration_s, iteration_s,
                      simulated_s, [], 0)


def test_the_launch_screens_baseline_row_flags_a_predicted_gain_measured_as_a_loss():
    line = baseline_line(_view(0.020, 0.010), _view(0.016, 0.015))
    assert line.plain == ("4,000 (data parallel, finished) · 0.80× measured · 1.50× "
                          "predicted · predicted faster, measured slower")
    assert {span.style for span in line.spans} == {"bold red"}
    held = baseline_line(_view(0.010, 0.010), _view(0.012, 0.015, "running"))
    assert held.plain == "5,333 (data parallel, running) · 1.20× measured · 1.50× predicted"
    assert "bold red" not in {span.style for span in held.spans}
