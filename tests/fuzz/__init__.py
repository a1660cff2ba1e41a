"""A fuzz campaign over every boundary where data enters flextui: search logs, run
logs, cluster files, strategy files, profile caches, command-line options, host lists,
node requests, model files, and signals at random moments of a launch and a search.

Each case runs the real command line in a subprocess and is judged by ``oracle``: an
expected exit status, no traceback, no raw terminal escape, strict JSON for --json, no
hang, no process left behind, saved work readable. ``python tests/fuzz`` runs a
campaign; tests/test_fuzz.py runs a few cases of each category in the test suite. It
lives with the tests (not in benchmarks/, which prints the README's figures) because it
is a test: it shares the tests' fake ssh and its cases are the slow test's cases."""
