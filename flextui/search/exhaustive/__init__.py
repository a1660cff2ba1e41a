"""Exhaustive search with branch and bound, for small graphs (FlexFlow paper 8.3): the
search (``search``), its lower bound's op-level tables (``tables``), the task-level
part of the bound (``task_bound``) and the schedule bounds it rests on
(``schedule_bound``). The search's docstring says why the bound is valid."""

from flextui.search.exhaustive.search import ExhaustiveResult, exhaustive_search

__all__ = ["ExhaustiveResult", "exhaustive_search"]
