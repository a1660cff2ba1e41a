"""``python tests/fuzz [--seed N] [--cases N] [--category C ...] [--only C:I ...]``: run
the fuzz campaign and print, per category, the cases run and the failures, each
failure with what the case did and the start of what it printed."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: `import fuzz`

from fuzz.campaign import CATEGORIES, campaign
from fuzz.oracle import Verdict

#: the share of --cases each category gets (a launch-signal case costs as much as
#: fifty file cases)
WEIGHTS = {"logs": 12, "runlogs": 8, "clusters": 12, "strategies": 12, "caches": 8,
           "options": 16, "hosts": 10, "node": 8, "models": 10, "signals": 2}


def main() -> int:
    p = argparse.ArgumentParser(prog="python tests/fuzz", description=__doc__)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=1000, help="cases in all, shared by weight")
    p.add_argument("--category", action="append", choices=tuple(CATEGORIES))
    p.add_argument("--only", action="append", metavar="CATEGORY:INDEX",
                   help="run these cases alone (to reproduce a failure)")
    p.add_argument("--work", type=Path, help="where cases run (default: a temporary "
                   "directory; failed cases are kept there)")
    p.add_argument("-v", "--verbose", action="store_true", help="a line per case")
    args = p.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="flextui-fuzz-"))
    if args.only:
        plan = [(c, [int(i)]) for c, _, i in (o.partition(":") for o in args.only)]
    else:
        chosen = args.category or list(CATEGORIES)
        total = sum(WEIGHTS[c] for c in chosen)
        plan = [(c, range(max(1, round(args.cases * WEIGHTS[c] / total)))) for c in chosen]

    def said(v: Verdict) -> None:
        if args.verbose or not v.ok:
            mark = "ok  " if v.ok else "FAIL"
            print(f"{mark} {v.case.name} [{v.code}] {v.seconds:5.1f}s  {v.case.what}"[:200],
                  flush=True)
        if not v.ok:
            print(f"     argv: {' '.join(v.case.argv[1:])}"[:400])
            for problem in v.problems:
                print(f"     - {problem}"[:400])
            print("     stderr: " + v.stderr.strip()[-600:].replace("\n", "\n       "))

    tallies = campaign(args.seed, plan, work / "bases", work / "cases", said)
    print(f"\nseed {args.seed}; work in {work}")
    print(f"{'category':<12}{'cases':>7}{'failures':>10}")
    for category, tally in tallies.items():
        print(f"{category:<12}{tally.cases:>7}{len(tally.failures):>10}")
    print(f"{'total':<12}{sum(t.cases for t in tallies.values()):>7}"
          f"{sum(len(t.failures) for t in tallies.values()):>10}")
    return 1 if any(t.failures for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
