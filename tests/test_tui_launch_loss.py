"""The Launch screen's loss chart: each step's loss, the ranks' shares summed, beside the
throughput, driven by recorded records with Textual's Pilot; a long run's losses stay
bounded and span the whole run."""

from flextui.runtime.metrics import Start, Steps
from flextui.session.launch_watch import LOSS_POINTS, Thinned
from flextui.tui.app import FlextuiApp
from flextui.tui.widgets.chart import Chart
from helpers import screen_text, wait_for
from test_tui_launch import FINISHED, SIZE, RecordedLaunch, lenet_prepared, open_launch


def shares(rank, step, loss):
    """Rank ``rank``'s report of step ``step``: its share of ``loss`` (rank 0 a quarter)."""
    share = loss / 4 if rank == 0 else loss * 3 / 4
    return Steps(rank, step, step, step == 0, 0.01, 0.006, 0.003, 10, 10, (share,),
                 300 * 2**20, None)


LOSSES = [4.0 - 0.25 * step for step in range(11)]
RECORDS = [Start(0, 1, "node-a", "cpu", 10, 1), Start(1, 2, "node-b", "cpu", 10, 1),
           *(shares(rank, step, loss) for step, loss in enumerate(LOSSES) for rank in (0, 1))]


async def test_the_loss_chart_shows_each_steps_summed_loss(tmp_path):
    live = RecordedLaunch(lenet_prepared(tmp_path), RECORDS, FINISHED)
    app = FlextuiApp()
    async with app.run_test(size=SIZE) as pilot:
        open_launch(app, live)
        await wait_for(pilot, lambda: live.done and app.screen._ended)
        view = live.view()
        assert [step for step, _ in view.losses] == list(range(11))
        assert [loss for _, loss in view.losses] == LOSSES
        await wait_for(pilot, lambda: "loss 1.5 at step 10" in screen_text(app))
        chart = app.screen.query_one("#launch-loss", Chart)
        (series,) = chart.data.series
        assert series.label == "loss 1.5 at step 10" and list(series.ys) == LOSSES
        assert list(series.xs) == [float(step) for step in range(11)]
        shown = screen_text(app)
        assert "━ loss 1.5 at step 10" in shown and "step" in shown
        assert chart.region.y < app.screen.query_one("#launch-devices").region.y
        figures = app.screen.query_one("#launch-figures")
        assert chart.region.x > figures.region.x and chart.region.y == figures.region.y


def test_a_long_runs_losses_are_bounded_and_span_it():
    thinned = Thinned()
    for step in range(100_000):
        thinned.add(step, 1.0 / (step + 1))
    steps = [step for step, _ in thinned.points]
    assert LOSS_POINTS // 2 <= len(steps) <= LOSS_POINTS
    assert steps[0] == 0 and steps[-1] >= 100_000 - thinned.stride
    assert len({b - a for a, b in zip(steps, steps[1:])}) == 1   # evenly spread
