"""Test machinery that runs real processes: generated traffic, audits, the chaos drill, failure drills.

Used by the tests, ``make chaos``, the benchmarks and the demo (its traffic); no
worker, server or command of the product imports it. Its place is at the top of the
layers, beside the entry points, because it drives whole workers.
"""
