"""One base for the errors preagg raises on purpose, each with the exit status it ends a command with.

A command (``preagg ...``) that fails on one of these prints one line, ``preagg: <the error>``,
and exits with the class's :attr:`PreaggError.exit_code`; anything else is a bug (a
traceback) or a server that did not answer (pipeline/store/errors.py, one line, exit 2).
The statuses, for scripts and supervisors:

====  =====================================================================================
2     the command line, a setting, an input file or the deployment's state is wrong (fix it)
3     another operator action holds the lease; run it again once that one is done
75    another worker counted the range (a fence); restart from MongoDB's positions
1     anything else preagg gave up on (an internal bound, a contended store): run it again
====  =====================================================================================
"""

from __future__ import annotations

from typing import ClassVar

#: The exit statuses above, by name.
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 3
EXIT_FENCED = 75


class PreaggError(Exception):
    """Base of every error preagg raises on purpose."""

    #: What a command that ends on this error exits with.
    exit_code: ClassVar[int] = EXIT_FAILED


class InputError(PreaggError, ValueError):
    """The command line, a setting or an input is wrong: one line naming what, exit 2."""

    exit_code: ClassVar[int] = EXIT_USAGE


class Undecidable(PreaggError):
    """Stored state a worker cannot go on from (its position is not its ledger's): trying again
    cannot help, so the flusher escalates it as it does a permanent write error."""
