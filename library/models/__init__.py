"""Built-in models, one module each; see ``flextui.graph.library`` for the contract."""
