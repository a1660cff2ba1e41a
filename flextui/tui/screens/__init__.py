"""The app's screens: Setup, Search (live or replayed), Timeline, Help."""
