"""A user's own PyTorch model as an operator graph: ``torch.export`` traces the module
(no decompositions), and each ATen op of the exported graph becomes one of flextui's op
types (``aten.py``), named after the module that ran it (``layer1.0.conv1``). Ops it
cannot map are all reported at once, each with its count, module and source line.

torch is imported only inside this package (and the kernels), never by the rest of the
graph layer.
"""

from flextui.graph.importer.convert import import_module
from flextui.graph.importer.unsupported import UnsupportedOps

__all__ = ["UnsupportedOps", "import_module"]
