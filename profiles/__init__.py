"""Reference operator profiles shipped with flextui (msgpack files, one per device kind)."""
