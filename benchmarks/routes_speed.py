"""Routes speed: every route a data-parallel step on 1,024 H100s needs, before and after.

The routes the simulator asks for on the library cluster h100-cluster resized to
``--devices`` GPUs (nodes of 8): the all-reduce ring over every GPU (0 -> 1 -> ... -> 0)
and ``--pairs`` random device pairs (seeded), from a fresh router each time. "before"
is the per-device networkx Dijkstra the routes were computed with until they were
searched per kind of source (kept as the tests' referee, tests/route_referee.py);
"after" is flextui.machine.routes. Both give the same links for every pair asked (checked
here too). Prints the seconds of each, their ratio, and the searches each ran; and the
seconds of the same routes as link ids from a fresh Cluster (route_link_ids, memoised).

    python benchmarks/routes_speed.py [--devices 1024] [--pairs 100000]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

GPUS_PER_NODE = 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.devices < GPUS_PER_NODE or args.devices % GPUS_PER_NODE:
        parser.error(f"--devices: whole nodes of {GPUS_PER_NODE} H100s (8, 16, ...)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from flextui.machine import Cluster, load_named_cluster
    from flextui.machine.routes import Router
    from route_referee import ReferenceRouter

    cluster = load_named_cluster("h100-cluster", nodes=args.devices // GPUS_PER_NODE)
    names = [d.name for d in cluster.devices]
    rng = random.Random(args.seed)
    pairs = [*zip(names, names[1:] + names[:1]),
             *((rng.choice(names), rng.choice(names)) for _ in range(args.pairs))]
    print(f"{cluster.name}: {cluster.num_devices} GPUs on {cluster.nodes} nodes, "
          f"{len(cluster.links)} links; {len(pairs):,} routes (ring {cluster.num_devices}, "
          f"random {args.pairs:,})", flush=True)

    start = time.perf_counter()
    router = Router(names, cluster.switches, cluster.links)
    after = [router.route(a, b) for a, b in pairs]
    after_s = time.perf_counter() - start
    print(f"after:  {after_s:8.3f} s  ({router.searches} switch searches)", flush=True)

    fresh = Cluster(cluster.name, cluster.devices, cluster.links, cluster.switches)
    ids = [(d.id, e.id) for d, e in ((fresh.device_by_name(a), fresh.device_by_name(b))
                                     for a, b in pairs)]
    start = time.perf_counter()
    for i, j in ids:
        fresh.route_link_ids(i, j)
    ids_s = time.perf_counter() - start
    print(f"after, as the simulator asks (Cluster.route_link_ids by device id): "
          f"{ids_s:.3f} s", flush=True)

    start = time.perf_counter()
    referee = ReferenceRouter(cluster)
    before = [referee.route(a, b) for a, b in pairs]
    before_s = time.perf_counter() - start
    sources = len({a for a, b in pairs if a != b})
    print(f"before: {before_s:8.3f} s  ({sources} Dijkstras over the whole graph)")
    if before != after:
        raise SystemExit("the routes differ from the referee's")
    print(f"speed-up: {before_s / after_s:.0f}x; every route the same")


if __name__ == "__main__":
    main()
