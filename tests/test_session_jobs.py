"""Job states are one enum: a background job (search, profile, launch), a replay and the
screens that show them read ``JobState``, never a state's text."""

import ast
from pathlib import Path

import pytest

from flextui.errors import FlextuiError
from flextui.runtime.launch import RunStatus
from flextui.session.jobs import BackgroundJob, JobState
from flextui.session.live_launch import ENDED_AS
from flextui.tui.widgets.stats import STATE_STYLES
from helpers import HANG_S

ROOT = Path(__file__).resolve().parents[1] / "flextui"


class Ends(BackgroundJob):
    """A job whose work ends it in ``state``, or fails with ``error``."""

    def __init__(self, state=None, error=None):
        super().__init__()
        self.end, self.error, self.failure = state, error, None

    def _work(self):
        if self.error is not None:
            raise self.error
        self._state = self.end

    def _failed(self, message):
        self.failure, self._state = message, JobState.FAILED


@pytest.mark.parametrize("end", [JobState.FINISHED, JobState.STOPPED])
def test_a_job_is_done_once_it_ends_and_not_before(end):
    job = Ends(end)
    assert job._state is JobState.STARTING and not job.done
    job.start()
    assert job.join(timeout=HANG_S) and job.done and job._state is end


@pytest.mark.parametrize("error", [FlextuiError("no such model"), KeyError("a bug")])
def test_a_job_that_raises_has_failed_and_says_why(error):
    job = Ends(error=error)
    job.start()
    assert job.join(timeout=HANG_S) and job._state is JobState.FAILED
    assert "no such model" in job.failure or "internal error: KeyError" in job.failure


def test_only_finished_stopped_and_failed_end_a_job():
    assert {s for s in JobState if s.ended} == \
        {JobState.FINISHED, JobState.STOPPED, JobState.FAILED}


def test_every_way_a_run_ends_is_the_launch_state_of_that_name():
    assert set(ENDED_AS) == set(RunStatus)
    assert all(state.ended and state.value == status.value
               for status, state in ENDED_AS.items())


def test_every_state_has_its_style_on_screen():
    assert set(STATE_STYLES) == set(JobState)
    assert all(type(state) is JobState for state in STATE_STYLES)


def _state_texts(tree: ast.AST) -> list[int]:
    """Lines that compare a ``state`` to a string or set one to a string."""
    def is_state(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr in ("state", "_state")) or \
            (isinstance(node, ast.Name) and node.id == "state")

    def is_text(node: ast.AST) -> bool:
        return (isinstance(node, ast.Constant) and isinstance(node.value, str)) or \
            (isinstance(node, ast.IfExp) and (is_text(node.body) or is_text(node.orelse)))

    def pairs(node: ast.Assign | ast.AnnAssign) -> list[tuple[ast.AST, ast.AST]]:
        """(target, value) of an assignment, element by element when both are tuples."""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        found: list[tuple[ast.AST, ast.AST]] = []
        for target in targets:
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                found += zip(target.elts, node.value.elts)
            elif node.value is not None:
                found.append((target, node.value))
        return found

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(map(is_state, [node.left, *node.comparators])) \
                and any(map(is_text, [node.left, *node.comparators])):
            found.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and \
                any(is_state(t) and is_text(v) for t, v in pairs(node)):
            found.append(node.lineno)
    return sorted(found)


def test_no_job_state_is_read_or_set_as_text():
    places = [f"{path.relative_to(ROOT)}:{line}"
              for package in ("session", "tui")
              for path in sorted((ROOT / package).rglob("*.py"))
              for line in _state_texts(ast.parse(path.read_text()))]
    assert places == []


def test_the_check_finds_a_state_read_as_text():
    assert _state_texts(ast.parse('if view.state == "failed":\n    self._state = "stopped"\n'
                                  'state = "a" if x else JobState.RUNNING\n'
                                  'self.error, self._state = m, "failed"\n'
                                  'self.error, self._state = "m", JobState.FAILED')) == [1, 2, 3, 4]
