"""Types of the C task store (``_ctaskstore.c``): the methods of the ``TaskStore``
protocol, which ``taskstore.PyTaskStore``, its pure-Python twin, meets too."""

from flextui.sim.taskstore import TaskStore

class CTaskStore(TaskStore):
    def __init__(self, num_resources: int) -> None: ...
