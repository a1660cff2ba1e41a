"""flextui's built-in library: models (Python files) and clusters (TOML files).

Installed as ``flextui.library``; add a model by dropping a file in ``models/`` that
defines ``build(**options) -> OpGraph``, ``DEFAULTS`` and ``DESCRIPTION``.
"""
