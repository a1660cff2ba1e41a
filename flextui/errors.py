"""Errors a user can cause.

Every error raised for bad input (an unknown model, a malformed cluster file, a
strategy that does not fit a graph) is a :class:`FlextuiError`. The CLI prints its
message alone and exits with status 2; anything else is a bug and keeps its traceback.
"""


class FlextuiError(Exception):
    """An error in what the user asked for or handed us; the message says what to fix."""


class GraphError(FlextuiError):
    """An operator graph that cannot be built (bad shapes, unknown op type, ...)."""


class ModelError(FlextuiError):
    """An unknown model name, a bad model option, or a model file that fails to load."""


class ClusterError(FlextuiError):
    """A cluster description that is malformed or inconsistent."""


class StrategyError(FlextuiError):
    """A parallelization strategy that does not fit its graph or cluster."""


class SearchLogError(FlextuiError):
    """A search log (.ffsearch) that cannot be read or written: foreign, corrupt, too new."""


class FieldError(FlextuiError):
    """A bad value in one named input (``field``: "budget", "workers", "batch_size"...).
    The message is the field's name and then ``problem``; a form shows it next to the
    field, the CLI names the flag instead (:attr:`flag_message`)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field.replace('_', ' ')} {problem}")
        self.field, self.problem = field, problem

    @property
    def flag_message(self) -> str:
        return f"--{self.field.replace('_', '-')} {self.problem}"
