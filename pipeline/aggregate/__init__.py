"""Pure in-memory aggregation and flush planning (no I/O)."""
