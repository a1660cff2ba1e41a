"""Built-in clusters, one TOML file each; see ``flextui.machine.toml`` for the format."""
