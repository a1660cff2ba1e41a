"""The Textual app (the only layer besides the CLI that imports Textual)."""
