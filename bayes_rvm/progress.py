"""Progress of long passes over the data (row blocks of a large fit), as lines on stderr.

The MCMC and VI fits draw PyMC's rich progress bars; the passes of a large type-II fit (the
sufficient statistics of 10^5 to 10^6 rows and more, in memory or on a Dask cluster) report
here, in the same places and on the same terms: on standard error, where a person is watching
(a terminal) or when asked for (``verbose=True``), and never for a pass that ends within
:data:`QUIET_SECONDS`. On a terminal the line is redrawn in place; elsewhere (a log file under
``verbose``) a line is written at most every :data:`LOG_SECONDS`, and one at the end.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Callable

__all__ = [
    "LOG_SECONDS",
    "QUIET_SECONDS",
    "Progress",
    "check_progress",
    "interactive",
    "no_auto_progress",
    "progress_wanted",
]

#: A pass that ends sooner shows nothing: progress for a fit of a second is noise.
QUIET_SECONDS = 2.0
#: Seconds between lines when standard error is not a terminal (``verbose=True``).
LOG_SECONDS = 10.0
#: Seconds between redraws on a terminal.
_REDRAW_SECONDS = 0.5
_AUTO_OFF = contextvars.ContextVar("bayes_rvm_auto_progress_off", default=False)


def interactive() -> bool:
    """Whether a person is watching: a Jupyter kernel, or standard error on a terminal.

    In a Jupyter kernel the progress bar is live only through ipywidgets; without them rich
    draws nothing but a warning to install them, so the bar is left out there.
    """
    import importlib.util

    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is not None and "IPKernelApp" in getattr(shell, "config", {}):
        return importlib.util.find_spec("ipywidgets") is not None
    stream = sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


@contextlib.contextmanager
def no_auto_progress():
    """Within it, ``"auto"`` progress stays off (the command line's ``--quiet``)."""
    token = _AUTO_OFF.set(True)
    try:
        yield
    finally:
        _AUTO_OFF.reset(token)


def check_progress(progress) -> None:
    """A ValueError naming ``progress`` unless it is True, False (or 0, 1, None) or ``"auto"``."""
    if isinstance(progress, str) and progress != "auto":
        raise ValueError(f'progress must be True, False or "auto", got {progress!r}.')


def progress_wanted(progress) -> bool:
    """``progress`` resolved: True or False as given, ``"auto"`` where stderr is a terminal
    (or a Jupyter kernel), as the MCMC progress bars are."""
    check_progress(progress)
    if isinstance(progress, str):
        return not _AUTO_OFF.get() and interactive()
    return bool(progress)


class Progress:
    """Reports ``done`` of ``total`` units of one pass, e.g. rows of a statistics pass, or the
    rounds of an iteration whose end is not known in advance (``total=None``).

    Parameters
    ----------
    what : str
        The pass, as the line names it (``"sufficient statistics"``).
    total : int or None
        The units of the whole pass; None for an open-ended one (the steps of an engine), whose
        last state is written when it closes.
    unit : str
        Their name, plural (``"rows"``).
    enabled : bool or "auto"
        :func:`progress_wanted`'s argument.
    stream : file, optional
        Default ``sys.stderr`` (at the time of each write, so that redirections apply).
    terminal : {"redraw", "erase", "lines"}, default="redraw"
        On a terminal: one line redrawn in place that stays at the end; the same, erased at the
        end (a pass within a longer fit, whose own line is drawn there next); or a line each
        time (the few rounds of a fit, each a milestone). Elsewhere a line each time.

    Examples
    --------
    >>> bar = Progress("sufficient statistics", 10**6, "rows", enabled=False)
    >>> for start in range(0, 10**6, 10**5):
    ...     bar.update(start + 10**5, blocks=(start // 10**5 + 1, 10))
    >>> bar.close()
    """

    def __init__(
        self,
        what: str,
        total: int | None,
        unit: str,
        *,
        enabled=False,
        stream=None,
        terminal: str = "redraw",
    ):
        if terminal not in ("redraw", "erase", "lines"):
            raise ValueError(f'terminal must be "redraw", "erase" or "lines", got {terminal!r}.')
        self.what, self.unit, self.terminal = what, unit, terminal
        self.total = None if total is None else int(total)
        self.enabled = progress_wanted(enabled)
        self._stream = stream
        self._start = time.perf_counter()
        self._last = -float("inf")
        self._shown = False
        self._line = ""
        self._pending = None

    @property
    def stream(self):
        return sys.stderr if self._stream is None else self._stream

    def _tty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def update(
        self,
        done: int,
        *,
        blocks: tuple[int, int] | None = None,
        detail: Callable[[], str] | None = None,
    ) -> None:
        """Record ``done`` units (of ``total``); ``blocks`` is ``(finished, all)`` where known;
        ``detail()`` is the state after them, called only when a line is written."""
        if not self.enabled:
            return
        now = time.perf_counter()
        finished = self.total is not None and done >= self.total
        wait = _REDRAW_SECONDS if self._tty() else LOG_SECONDS
        if now - self._start < QUIET_SECONDS or (now - self._last < wait and not finished):
            self._pending = (done, blocks, detail)
            return
        self._show(now, done, blocks, detail)

    def _show(self, now: float, done: int, blocks, detail) -> None:
        self._last, self._pending = now, None
        if self.total is None:
            text = f"{done:,} {self.unit}"
        else:
            share = 100.0 * done / self.total if self.total else 100.0
            text = f"{share:3.0f}% ({done:,} of {self.total:,} {self.unit}"
            text += ")" if blocks is None else f", block {blocks[0]} of {blocks[1]})"
        if detail is not None:
            text += f", {detail()}"
        self._line = f"bayes_rvm: {self.what}: {text}, {now - self._start:.0f} s"
        self._write(self._line)

    def _write(self, line: str) -> None:
        if self._tty():
            self.stream.write("\r" + line + ("\x1b[K\n" if self.terminal == "lines" else "\x1b[K"))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the pass: the line stays (on a terminal, the cursor moves to the next line, or
        the line is erased: ``terminal="erase"``).

        An open-ended pass that outlasted :data:`QUIET_SECONDS` writes its last state first.
        """
        now = time.perf_counter()
        if self._pending is not None and self.total is None and now - self._start >= QUIET_SECONDS:
            self._show(now, *self._pending)
        if self._shown and self._tty() and self.terminal != "lines":
            self.stream.write("\r\x1b[K" if self.terminal == "erase" else "\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
