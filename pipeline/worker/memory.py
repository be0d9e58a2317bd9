"""The worker's resident memory, for metrics and the ledgers (``preagg status``).

Batches are bounded by ``PREAGG_MAX_PENDING_KEYS``, not by a transaction's size: what
that bound costs in memory is measured here, where it is spent.
"""

from __future__ import annotations

import os
import resource


def rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc``), else its peak (``getrusage``)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
