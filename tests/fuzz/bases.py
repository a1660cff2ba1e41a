"""The real files the mutations start from, made by flextui itself the first time a
case asks for one (a finished search's log, a finished launch's run log, a CPU profile
cache and communication calibration, exported strategies) and kept for the campaign,
or taken from the repository (library clusters, a test model)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from fuzz.oracle import FLEXTUI
from helpers import TWO_CPUS_CLUSTER

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
FAKE_SSH = TESTS / "fake_hosts" / "fake_ssh.py"
CLUSTERS = [REPO / "library" / "clusters" / name
            for name in ("local-cpu.toml", "p100-4x4.toml", "k80-16x4.toml")]
#: a cluster listed device by device and link by link (the explicit form)
EXPLICIT_CLUSTER = TWO_CPUS_CLUSTER.format(name="", description="", kind="", device="",
                                           link="")
#: the model and cluster the strategies, logs and caches are made for
MODEL_NAME, CLUSTER_NAME = "lenet", "local-cpu-4"
STRATEGIES = ("data-parallel", "model-parallel", "random", "expert", "searched")


class Bases:
    """The base files in ``directory``, each made there when first asked for."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def _made(self, name: str, *argv: str) -> Path:
        path = self.directory / name
        if not path.exists():
            done = subprocess.run([FLEXTUI, *argv], cwd=self.directory, capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL, timeout=600)
            if done.returncode != 0 or not path.exists():
                raise RuntimeError(f"flextui {' '.join(argv)} failed: {done.stderr[-2000:]}")
        return path

    @functools.cached_property
    def search_log(self) -> Path:
        """A finished search of two chains, 300 steps each."""
        return self._made("base.ffsearch", "search", "-m", MODEL_NAME, "-c", CLUSTER_NAME,
                          "--budget", "300", "--seed", "1", "--workers", "2",
                          "--no-early-stop", "--out", "base.ffsearch", "--export-strategy",
                          "searched.json")

    @functools.cached_property
    def run_log(self) -> Path:
        """A finished launch of two CPU ranks, 3 steps."""
        return self._made("base.ffrun", "launch", "--headless", "-m", MODEL_NAME,
                          "--nproc-per-node", "2", "--steps", "3", "--run-log", "base.ffrun")

    @functools.cached_property
    def profiles(self) -> Path:
        """A profile directory: the CPU's profile cache and its communication calibration."""
        self._made("profiles", "profile", "-m", MODEL_NAME, "--device", "cpu", "--repeats", "1",
                   "--warmup", "0", "--max-devices", "4", "--profiles", "profiles")
        return self._made("profiles/cpu.comm.msgpack", "profile", "--comm", "--device", "cpu",
                          "--profiles", "profiles").parent

    @property
    def cache(self) -> Path:
        return next(p for p in self.profiles.glob("*.msgpack") if ".comm." not in p.name)

    @property
    def calibration(self) -> Path:
        return next(self.profiles.glob("*.comm.msgpack"))

    def strategy(self, name: str) -> Path:
        if name == "searched":
            return self.search_log.with_name("searched.json")
        return self._made(f"{name}.json", "show", "-m", MODEL_NAME, "-c", CLUSTER_NAME, "-s",
                          name, "--export", f"{name}.json")
