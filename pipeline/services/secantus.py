"""Run SecantusDB's own command line with a shorter transaction lifetime.

A worker killed in the middle of a flush leaves its transaction open; the server
aborts it only after the transaction lifetime (60 s, as mongod's
``transactionLifetimeLimitSeconds``), and until then the partition's next owner
cannot write the same documents. SecantusDB offers no flag or ``setParameter`` for
it, so this wrapper passes ``transaction_lifetime_seconds`` to the server class its
command line builds. Our flush statements are bounded (``MongoSink.statement_ops``),
so a live flush never idles that long. On real MongoDB, set
``transactionLifetimeLimitSeconds`` the same way (docs/exactly-once.md).

Usage: ``python -m pipeline.services.secantus [secantusd-py options]``.
"""

from __future__ import annotations

import functools
import sys

#: Seconds an idle transaction lives on the embedded store.
TRANSACTION_LIFETIME = 10.0


def main() -> int:
    """SecantusDB's ``secantusd-py`` with :data:`TRANSACTION_LIFETIME`."""
    from secantus import cli

    server_class = getattr(cli, "SecantusDBServer", None)
    if server_class is not None:
        cli.SecantusDBServer = functools.partial(  # type: ignore[attr-defined]
            server_class, transaction_lifetime_seconds=TRANSACTION_LIFETIME
        )
    else:  # a SecantusDB without that hook: keep its default, say so
        print("preagg: SecantusDB transaction lifetime left at its default", file=sys.stderr)
    sys.argv[0] = "secantusd-py"
    result: int = cli.main() or 0
    return result


if __name__ == "__main__":
    sys.exit(main())
