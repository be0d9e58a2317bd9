"""Writers of planned updates to stores (I/O)."""
