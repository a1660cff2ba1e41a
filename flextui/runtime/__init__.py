"""The runtime: a strategy trained for real, one torchrun rank per simulated device.

``plan`` compiles (graph, strategy) into what every rank computes and moves, with the
simulator's own code; ``engine`` is one rank's training step; ``comm`` its traffic
(torch.distributed); ``values`` the starting parameters and synthetic data, block by
block; ``reference`` the whole graph trained in one process, which a run must equal;
``spec`` the launch plan ranks read; ``metrics`` what they report; ``worker`` the rank
program torchrun starts; ``launch`` starts torchrun and follows the run. Nothing here
imports Textual.
"""
