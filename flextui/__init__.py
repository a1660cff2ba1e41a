"""flextui: find fast parallelization strategies for deep networks on GPU clusters.

A reimplementation of FlexFlow's SOAP search space, execution simulator and MCMC
search. The core (everything except ``flextui.tui`` and ``flextui.cli``) imports no
Textual and runs headless.
"""

__version__ = "0.1.0"
