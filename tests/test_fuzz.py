"""A few seeded cases of each category of the fuzz campaign (tests/fuzz): whatever a
log, cluster file, strategy, profile cache, option, host list, node request or model
file holds, and whenever a launch or a search is signalled, flextui ends with an
expected exit status, prints no traceback and no raw terminal escape, prints valid JSON
for --json, does not hang, leaves no process behind and keeps saved work readable.
``python tests/fuzz --cases 1000`` runs the whole campaign."""

import pytest

from fuzz.campaign import CATEGORIES, campaign
from helpers import HANG_S

SEED = 27
#: cases per category: about a minute in all (a launch-signal case costs a few seconds
#: and a launch; a file case about one)
CASES = {"logs": 4, "runlogs": 3, "clusters": 4, "strategies": 4, "caches": 3, "options": 4,
         "hosts": 3, "node": 3, "models": 4, "signals": 2}


@pytest.fixture(scope="session")
def fuzz_bases(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-bases")


@pytest.mark.slow
@pytest.mark.xdist_group("fuzz")  # one worker: the categories share the base files
@pytest.mark.parametrize("category", list(CATEGORIES))
def test_fuzz_cases_end_cleanly(category, fuzz_bases, tmp_path):
    tally = campaign(SEED, [(category, range(CASES[category]))], fuzz_bases, tmp_path,
                     hang_s=HANG_S, teardown_s=HANG_S)[category]
    assert tally.cases == CASES[category]
    assert not tally.failures, "\n".join(
        f"{v.case.name} ({v.case.what}): {'; '.join(v.problems)}\n  argv: {v.case.argv[1:]}\n"
        f"  stderr: {v.stderr[-800:]}\n  again: python tests/fuzz --seed {SEED} --only "
        f"{v.case.name}" for v in tally.failures)
