"""The signal policy of pd-doctor's first milliseconds, before anything is started.

The console script imports typer, rich and every command before `cli.main` can install the
real policy (`procs.install`); a Ctrl-C in that window would print a KeyboardInterrupt
traceback. `install` (stdlib only, called by the package's `__init__` when the process is the
`pd-doctor` command, and by `__main__`) makes SIGINT, SIGTERM and SIGHUP end the process at
once with 130, 143 or 129 and one line: nothing has been started yet, nothing needs stopping.
A signal that is ignored (nohup) stays ignored.
"""

from __future__ import annotations

import os
import signal


def _stop(signum: int, frame: object) -> None:
    try:
        os.write(2, f"pd-doctor: stopped by {signal.Signals(signum).name}\n".encode())
    except OSError:
        pass
    os._exit(128 + signum)


def install() -> None:
    """Install the early handlers (main thread only; a no-op elsewhere)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                continue
            signal.signal(sig, _stop)
        except (ValueError, OSError):  # not the main thread
            return
