"""Run SecantusDB's own command line with a shorter transaction lifetime and no oplog.

A worker killed in the middle of a flush leaves its transaction open; the server
aborts it only after the transaction lifetime (60 s, as mongod's
``transactionLifetimeLimitSeconds``), and until then the partition's next owner
cannot write the same documents. SecantusDB offers no flag or ``setParameter`` for
it, so this wrapper passes ``transaction_lifetime_seconds`` to the server class its
command line builds. Our flush statements are bounded (``MongoSink.statement_ops``),
so a live flush never idles that long. On real MongoDB, set
``transactionLifetimeLimitSeconds`` the same way (docs/exactly-once.md).

It also runs the store without its oplog (``PREAGG_EMBEDDED_OPLOG=1`` keeps it):
preagg reads no change stream, and SecantusDB computes each update's oplog entry by
walking the whole old and new document in Python, BSON-encoding every field to
compare it. A profile of warm 236-field documents under live-flush updates put 60%
of the server's time there; without it the same updates ran 2.9 times as fast
(``make bench-store``, docs/benchmarks.md). The server still answers as a replica-set
primary, so transactions and retryable writes behave as before.

Usage: ``python -m pipeline.services.secantus [secantusd-py options]``.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

#: Seconds an idle transaction lives on the embedded store.
TRANSACTION_LIFETIME = 10.0
#: Set to 1 to keep the store's oplog (change streams); off by default.
KEEP_OPLOG = "PREAGG_EMBEDDED_OPLOG"


def main() -> int:
    """SecantusDB's ``secantusd-py``: :data:`TRANSACTION_LIFETIME`, no oplog unless :data:`KEEP_OPLOG`."""
    from secantus import cli

    server_class = getattr(cli, "SecantusDBServer", None)
    if server_class is not None:
        made = functools.partial(server_class, transaction_lifetime_seconds=TRANSACTION_LIFETIME)
        keep_oplog = os.environ.get(KEEP_OPLOG, "") not in ("", "0")

        def server(*args: Any, **kwargs: Any) -> Any:
            built = made(*args, **kwargs)
            storage = getattr(built, "storage", None)
            if keep_oplog:
                return built
            if storage is not None and hasattr(storage, "enable_oplog"):
                storage.enable_oplog = False
            else:  # a SecantusDB built otherwise: its oplog stays, say so
                print("preagg: SecantusDB oplog left on", file=sys.stderr)
            return built

        cli.SecantusDBServer = server  # type: ignore[attr-defined]
    else:  # a SecantusDB without that hook: keep its default, say so
        print("preagg: SecantusDB transaction lifetime left at its default", file=sys.stderr)
    sys.argv[0] = "secantusd-py"
    result: int = cli.main() or 0
    return result


if __name__ == "__main__":
    sys.exit(main())
