"""What every engine records per step: objective trace, actions, callback and progress bar.

The one progress mechanism of the package's engines is a rich progress bar, the library PyMC's
own progress bars are drawn with, so a type-II fit and the MCMC run after it look alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["Recorder"]

#: Steps between refreshes of the progress bar's text (the count advances every step).
_STATUS_EVERY = 10


class Recorder:
    """Trace of the objective and of the actions, with the callback and the progress bar.

    Parameters
    ----------
    name : str
        Engine name shown by the progress bar.
    callback : callable or None
        Called with a dict after every step (see :class:`~bayes_rvm.evidence.EvidenceOptions`);
        returning True stops the fit.
    progress : bool
        Draw a progress bar.

    Use as a context manager so that the bar is removed however the fit ends.
    """

    def __init__(self, name: str, callback: Callable[[dict[str, Any]], Any] | None, progress: bool):
        self.trace: list[float] = []
        self.actions: list[str] = []
        self.callback = callback
        self._bar = None
        if progress:
            from rich.progress import Progress, SpinnerColumn, TextColumn

            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}: {task.completed} steps"),
                TextColumn("{task.fields[status]}"),
                transient=True,
            )
            self._task = self._bar.add_task(name, total=None, status="")
            self._bar.start()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
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
        the callback or the progress bar needs them (the fast engines record thousands of steps).
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
            status = None
            if len(self.actions) % _STATUS_EVERY == 0:
                status = f"{state()['n_active']} active, objective {objective:.8g}"
            self._bar.update(self._task, advance=1, **({"status": status} if status else {}))
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
