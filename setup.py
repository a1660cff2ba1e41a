"""Builds the simulator's C event loop; all other metadata is in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and the
simulator runs its pure-Python loop (same results, about 20x slower searches)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("flextui.sim._ctaskstore", ["flextui/sim/_ctaskstore.c"],
                             optional=True)])
