"""Plain-data summaries of a search run or a search log, for the CLI's text and --json."""

from __future__ import annotations

from typing import Any

from flextui.cost.identity import cost_model_label
from flextui.cost.model import CostModel
from flextui.graph import OpGraph
from flextui.machine import Cluster
from flextui.search.baselines import baseline_costs, search_simulator
from flextui.search.compute_bound import work_lower_bound
from flextui.search.log import SearchLog
from flextui.search.options import SearchOptions
from flextui.search.runner import SearchResult
from flextui.strategy import Strategy
from flextui.strategy.summary import sharded_counts


def _frontier(points) -> list[dict[str, float]]:
    return [{"time_s": p.time, "memory_bytes": p.memory} for p in points]


def search_summary(result: SearchResult, graph: OpGraph, cluster: Cluster,
                   cost_model: CostModel, options: SearchOptions) -> dict[str, Any]:
    baselines = result.baselines or baseline_costs(graph, cluster, cost_model, options)
    dp, expert = baselines["data-parallel"], baselines["expert"]
    return {
        "model": graph.meta.get("model", graph.name), "cluster": cluster.name,
        "best_s": result.best_cost, "initial_s": result.initial_cost,
        "data_parallel_s": dp, "expert_s": expert,
        "speedup_over_data_parallel": dp / result.best_cost,
        "speedup_over_expert": expert / result.best_cost,
        "lower_bound_s": work_lower_bound(graph, cluster, cost_model, options.training),
        "iterations": result.iterations, "acceptance_rate": result.acceptance_rate,
        "elapsed_s": result.elapsed, "reason": result.reason, "best_chain": result.best_chain,
        "chains": [{"chain": c.chain, "iterations": c.iterations, "accepted": c.accepted,
                    "initial_s": c.initial_cost, "best_s": c.best_cost, "reason": c.reason}
                   for c in result.chains],
        "frontier": _frontier(result.frontier),
    }


def strategy_figures(strategy: Strategy, graph: OpGraph, cluster: Cluster,
                     cost_model: CostModel, options: SearchOptions) -> dict[str, Any]:
    """A strategy as the search sees it: its simulated cost, the memory of its fullest
    device and the search's memory budget (None without one), to compare the two, how
    many of its ops it recomputes, how many parameters it shards at each stage and the
    micro-batches it cuts the batch into."""
    timeline = search_simulator(graph, cluster, cost_model, options).simulate(strategy)
    return {"strategy_s": timeline.cost,
            "strategy_memory_bytes": max(d.memory.total for d in timeline.devices),
            "memory_budget_bytes": options.memory_budget,
            "recomputed_ops": sum(c.recompute for c in strategy.values()),
            "sharded_params": sharded_counts(strategy),
            "microbatches": strategy.pipeline.microbatches,
            "schedule": strategy.pipeline.schedule.value}


def best_over_time(log: SearchLog) -> list[dict[str, float]]:
    """Every time the best cost over all chains improved: (elapsed, chain, iteration, best)."""
    rows, best = [], float("inf")
    for cp in log.checkpoints:
        if cp.iteration == 0 and cp.best_cost < best:
            best = cp.best_cost
            rows.append({"elapsed_s": 0.0, "chain": cp.chain, "iteration": 0, "best_s": best})
    for e in sorted(log.steps, key=lambda e: (e.elapsed, e.chain)):
        if e.best < best:
            best = e.best
            rows.append({"elapsed_s": e.elapsed, "chain": e.chain, "iteration": e.iteration,
                         "best_s": best})
    return rows


def log_summary(log: SearchLog, cost_model: CostModel) -> dict[str, Any]:
    header = log.header
    options = header.options
    best, best_cost = log.best_strategy()
    baselines = baseline_costs(header.graph, header.cluster, cost_model, options)
    steps = log.steps
    final = log.final
    return {
        "log": str(log.path), "model": header.graph.meta.get("model", header.graph.name),
        "cluster": header.cluster.name, "flextui_version": header.flextui_version,
        "created": header.created, "cost_model": cost_model_label(header.cost_model),
        "seed": header.seed,
        "options": header.options.to_dict(), "finished": final is not None,
        "reason": final.reason if final else None, "truncated": log.truncated,
        "iterations": len(steps),
        "acceptance_rate": sum(e.accepted for e in steps) / max(1, len(steps)),
        "elapsed_s": log.elapsed,
        "best_s": best_cost, "data_parallel_s": baselines["data-parallel"],
        "expert_s": baselines["expert"],
        "speedup_over_data_parallel": baselines["data-parallel"] / best_cost,
        "best_over_time": best_over_time(log),
        "frontier": _frontier(final.frontier if final
                              else (log.frontiers[-1] if log.frontiers else [])),
        "best": best,
    }
