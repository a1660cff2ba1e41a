"""Finds the packages and builds the simulator's C task store (csrc/); all other metadata is in
pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and the
simulator runs its pure-Python twin (same results; a proposal about 12x slower)."""

from setuptools import Extension, find_packages, setup

#: installed from the top of the repo under flextui (see [tool.setuptools.package-dir])
TOP_LEVEL = ["flextui.library", "flextui.library.models", "flextui.library.clusters",
             "flextui.profiles"]

setup(packages=find_packages(include=["flextui", "flextui.*"]) + TOP_LEVEL,
      ext_modules=[Extension("flextui.sim._ctaskstore",
                             [f"flextui/sim/csrc/{name}.c"
                              for name in ("store", "build", "loop", "plan")],
                             depends=["flextui/sim/csrc/store.h"], optional=True)])
