"""What every engine records per step: objective trace, actions, callback and progress lines.

The engines report their steps as the passes over the data report their rows
(:class:`bayes_rvm.progress.Progress`): lines on standard error, redrawn in place on a terminal,
at most every 10 s elsewhere, none for a fit that ends within 2 s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bayes_rvm.progress import Progress

__all__ = ["Recorder"]


class Recorder:
    """Trace of the objective and of the actions, with the callback and the progress lines.

    Parameters
    ----------
    name : str
        Engine name shown by the progress lines.
    callback : callable or None
        Called with a dict after every step (see :class:`~bayes_rvm.evidence.EvidenceOptions`);
        returning True stops the fit.
    progress : bool or "auto"
        Report the steps, the relevance vectors and the log evidence on stderr
        (:func:`bayes_rvm.progress.progress_wanted`).
    unit : str, default="steps"
        What the engine counts (``"rounds"``).
    terminal : {"redraw", "lines"}, default="redraw"
        On a terminal, one line redrawn in place, or a line per step (the few rounds of a
        chunked fit), as :class:`bayes_rvm.progress.Progress` takes it.

    Use as a context manager so that the last line is written however the fit ends.
    """

    def __init__(
        self,
        name: str,
        callback: Callable[[dict[str, Any]], Any] | None,
        progress: bool | str,
        unit: str = "steps",
        terminal: str = "redraw",
    ):
        self.trace: list[float] = []
        self.actions: list[str] = []
        self.callback = callback
        self._bar = Progress(name, None, unit, enabled=progress, terminal=terminal)
        self._steps = 0  # objectives recorded: a step undone and redone counts twice
        if not self._bar.enabled:
            self._bar = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def start(self, action: str, objective: float | None = None) -> None:
        """Record the start (``actions[0]``, and ``trace[0]`` when the objective is known)."""
        self.actions.append(action)
        if objective is not None:
            self.trace.append(objective)

    def __call__(
        self, action: str, objective: float, gain: float, state: Callable[[], dict]
    ) -> bool:
        """Record one step and the objective after it; True when the callback asks to stop.

        ``state`` returns ``n_active``, ``beta``, ``active`` and ``alpha``; it is called only when
        the callback or a progress line needs them (the fast engines record thousands of steps).
        """
        self.actions.append(action)
        return self.objective(objective, gain, state)

    def step(self, action: str) -> None:
        """Record a step whose objective comes later (:meth:`objective`), or never (undone)."""
        self.actions.append(action)

    def objective(self, objective: float, gain: float, state: Callable[[], dict]) -> bool:
        """Record the objective after the last step; True when the callback asks to stop."""
        self.trace.append(objective)
        if self._bar is not None:
            self._steps += 1
            self._bar.update(
                self._steps,
                detail=lambda: (
                    f"{state()['n_active']} relevance vectors, log evidence {objective:.8g}"
                ),
            )
        if self.callback is None:
            return False
        info = {
            "step": len(self.actions) - 1,
            "action": self.actions[-1],
            "objective": objective,
            "gain": gain,
            **state(),
        }
        return self.callback(info) is True
