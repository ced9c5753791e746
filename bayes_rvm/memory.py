"""The memory a fit may plan for, and the early MemoryError that says what to do instead.

The limit is ``BAYES_RVM_MAX_MEMORY`` if set, else half the memory the system reports as
available; :func:`check_fit_memory` checks a fit's design matrix against it before any kernel
is evaluated.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

__all__ = ["MEMORY_ENV", "check_fit_memory", "check_memory", "memory_limit"]

#: Environment variable that sets the memory a fit may plan for (bytes, or "16GiB", "500MB").
MEMORY_ENV = "BAYES_RVM_MAX_MEMORY"
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})


def memory_limit() -> tuple[float | None, str]:
    """Bytes a fit may plan to allocate, and where that figure comes from.

    ``BAYES_RVM_MAX_MEMORY`` if set, else half the memory the system reports as available
    (``MemAvailable`` on Linux): the engines, the kernel's temporaries and whatever else runs need
    room beside the design matrix. None (no check) where the system does not say.
    """
    value = os.environ.get(MEMORY_ENV)
    if value:
        match = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", value)
        unit = match and _UNITS.get(match.group(2).lower())
        if not match or unit is None:
            raise ValueError(
                f"{MEMORY_ENV}={value!r} is not an amount of memory (examples: 16GiB, 500MB, 2e10)."
            )
        return float(match.group(1)) * unit, f"{MEMORY_ENV}={value}"
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        available = float(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        try:
            available = float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None, "unknown"
    return 0.5 * available, f"half the {available / 2**30:.1f} GiB available"


def check_memory(who: str, what: str, n_floats: float, advice: Callable[[float], str]) -> None:
    """Stop with a MemoryError that says what to do before an allocation that cannot fit.

    Parameters
    ----------
    who : str
        The call, as the message names it (``"RVR"``, ``"RVR.sample_y"``).
    what : str
        What needs the memory (``"a 50000 x 50001 design matrix"``).
    n_floats : float
        The float64 values it holds (a float: counts can leave the integers' range).
    advice : callable
        ``advice(limit) -> str``: what to do instead, given the limit in bytes.
    """
    need = 8.0 * n_floats
    limit, source = memory_limit()
    if limit is None or need <= limit:
        return
    raise MemoryError(
        f"{who}: {what}, {need / 2**30:.1f} GiB, more than the limit of {limit / 2**30:.1f} GiB "
        f"({source}). {advice(limit)} Set the environment variable {MEMORY_ENV} (e.g. 64GiB) to "
        "change the limit."
    )


def check_fit_memory(who: str, n_samples: int, n_basis: int, *, squares: int = 0) -> None:
    """:func:`check_memory` of a fit, with a subset of centres that fits as the advice.

    The estimate is the N x M float64 design matrix plus ``squares`` M x M float64 matrices (the
    MacKay engines' Gram matrix or Hessian, the marginal MCMC model's Gram matrix); everything
    else a fit allocates is O(N K) in the K retained basis functions.
    """

    def floats(m: int) -> float:
        return float(n_samples) * m + squares * float(m) ** 2

    def advice(limit: float) -> str:
        sizes = [n for n in (2000, 1000, 500, 200, 100) if n < n_samples]
        fits = [n for n in sizes if 8.0 * floats(n + 1) <= limit / 2]
        hint = (
            f"{who}(centres=('kmeans', {fits[0]})) (or ('random', {fits[0]})) needs "
            f"{8.0 * floats(fits[0] + 1) / 2**30:.2f} GiB"
            if fits
            else f"even {who}(centres=('random', 100)) does not fit: subsample the data"
        )
        return f"Place the basis functions on a subset of the inputs: {hint}."

    check_memory(
        who,
        f"a fit on {n_samples} samples with {n_basis} basis functions needs a "
        f"{n_samples} x {n_basis} design matrix"
        + (f" and {squares} more of {n_basis} x {n_basis}" if squares else ""),
        floats(n_basis),
        advice,
    )
