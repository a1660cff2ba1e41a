"""A rank that torchrun starts for tests/test_runtime_records.py: it says it started,
prints a record missing its fields, then far more output than a pipe holds, then a
good record, and ends well."""

import os
import sys

from flextui.runtime.metrics import End, Start, encode

LINES = 5000


def main() -> int:
    rank = int(os.environ["RANK"])
    print(encode(Start(rank, os.getpid(), "localhost", "cpu", LINES, 0)), flush=True)
    print(f'@flextui {{"kind": "steps", "rank": {rank}}}', flush=True)
    for n in range(LINES):
        print(f"line {n} of rank {rank}: " + "x" * 60)
    print(encode(End(rank)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
