"""Ground-truth lab: servers with known CCAs behind an emulated Internet path."""
