"""The one exception family rladv raises; the CLI turns it into ``Error: <message>`` and exit code 2."""
from __future__ import annotations

import os
import re
import signal
from functools import partial

# Characters that would break a one-line message or a terminal: C0/C1 controls, line and paragraph separators,
# and lone surrogates (undecodable bytes of a file name, which cannot be printed as they are).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def shown(path: "str | os.PathLike") -> str:
    """``path`` as a message shows it: as given, or quoted with Python's escapes (``'bad\\nname.parquet'``) when
    it holds a character that would split the message or garble a terminal."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else str(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return repr(text) if _UNPRINTABLE.search(text) else text


def one_line(message: str) -> str:
    """``message`` with every such character written as its escape (``\\n``, ``\\x1b``): one line, printable."""
    return _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], message)


# The signals that raise ``Interrupted`` in the executable (those this platform has).
TERMINATION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (the ``rladv`` executable raises it from its signal handlers, as Python raises
    ``KeyboardInterrupt`` for SIGINT): a ``BaseException``, so it unwinds through every cleanup on its way out.
    The executable then exits with ``128 + signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


class RladvError(Exception):
    """Base of every error rladv reports to a user; ``str(err)`` is one line a person can act on.

    Example: ``rollouts.parquet: row 1042, column response_mask: value 2; masks must be 0 or 1``
    """


class ConfigError(RladvError):
    """An option or a combination of options is invalid, found before any data is read.

    Example: ``--gamma must be in [0, 1], got 1.5``
    """


class InputError(RladvError):
    """The dataset breaks the data contract (docs/contract.md §1); names file, row and column.

    Example: ``data/a.parquet: row 7, column rm_scores: length 12 differs from response_mask's 13``
    """

    def __init__(self, path: str, message: str, *, row: int | None = None, column: str | None = None,
                 kind: str | None = None):
        where = [shown(path)]
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column {column}")
        super().__init__(", ".join(where[:1]) + (": " + ", ".join(where[1:]) if len(where) > 1 else "") + f": {message}")
        self.path, self.row, self.column, self.message = str(path), row, column, message
        self.kind = kind or message  # the problem without its values, to count problems of one kind

    def __reduce__(self):
        # rebuilt from its arguments, so it crosses process boundaries (Ray workers) intact
        return partial(InputError, row=self.row, column=self.column, kind=self.kind), (self.path, self.message)


class ComputeError(RladvError):
    """The data is well formed but the reference computation is undefined for it (verl would raise).

    Example: ``reinforce_plus_plus: batch step=3 has 1 valid token; whitening needs at least 2``
    """


class OutputError(RladvError):
    """The output cannot be written where asked.

    Example: ``-o rollouts.parquet is one of the inputs; rladv never writes onto its input``
    """
