"""Benchmarks (``make bench``): they measure and write results; tests assert behaviour."""
