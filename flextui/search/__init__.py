"""Strategy search: MCMC over the delta simulator, exhaustive search for small graphs,
the time/memory frontier, and search logs (.ffsearch)."""

from flextui.search.events import RestartEvent, StepEvent, StopReason
from flextui.search.exhaustive import ExhaustiveResult, exhaustive_search
from flextui.search.frontier import Frontier
from flextui.search.log import SearchLog, read_search_log
from flextui.search.logwriter import SearchLogWriter
from flextui.search.options import SearchOptions, parse_budget, parse_size
from flextui.search.runner import SearchResult, run_search

__all__ = ["ExhaustiveResult", "Frontier", "RestartEvent", "SearchLog", "SearchLogWriter",
           "SearchOptions", "SearchResult", "StepEvent", "StopReason", "exhaustive_search",
           "parse_budget", "parse_size", "read_search_log", "run_search"]
