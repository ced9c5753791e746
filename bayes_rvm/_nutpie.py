"""nutpie through its function-based entry, on PyTensor numba functions cached on disk.

``nutpie.compile_pymc_model`` wraps the model's log density in numba C callbacks that embed the
data as dynamic globals, so numba cannot cache them: every new process pays 10-35 s of
compilation. Here the log density and the trace expansion are compiled by PyTensor's numba
backend, whose machine code *is* cached on disk (keyed on the graph), and handed to
``nutpie.compiled_pyfunc.from_pyfunc``, nutpie's entry for Python callables. A fresh process then
loads the compiled functions in about a second. This works for any PyMC model, including one a
user built or extended; nothing here depends on the RVM.

The final functions are compiled with ``nogil=True`` (a linker that differs from PyTensor's only
in that flag, with its own cache entries), so nutpie's chains, which run in threads and call back
into Python, evaluate their gradients in parallel.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from functools import cache, wraps

import numpy as np

__all__ = ["compile_nutpie", "with_initial_points"]


@cache
def _nogil_numba_mode():
    from pytensor.compile.mode import Mode, get_mode
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
    from pytensor.link.numba.dispatch.basic import numba_njit
    from pytensor.link.numba.linker import NumbaLinker

    class NogilNumbaLinker(NumbaLinker):
        """PyTensor's numba linker with the GIL released by the final function."""

        def jit_compile(self, fn_and_cache):
            fn, cache_key = fn_and_cache
            py_func = fn.py_func
            if cache_key is not None and py_func in CACHED_SRC_FUNCTIONS:
                # A cache entry of its own: numba's index does not record nogil.
                CACHED_SRC_FUNCTIONS[py_func] = f"{CACHED_SRC_FUNCTIONS[py_func]}_nogil"
            return numba_njit(py_func, final_function=True, cache=cache_key is not None, nogil=True)

    return Mode(linker=NogilNumbaLinker(), optimizer=get_mode("NUMBA").provided_optimizer)


def _locked(fn):
    # nutpie asks for initial points from its chain threads at once; PyMC's initial-point
    # function is a compiled PyTensor function, whose storage is not thread-safe.
    lock = threading.Lock()

    @wraps(fn)
    def locked(*args, **kwargs):
        with lock:
            return fn(*args, **kwargs)

    return locked


def compile_nutpie(model):
    """Compile ``model`` for ``nutpie.sample`` through nutpie's function-based entry.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    nutpie compiled model
        Supports ``with_data`` for every shared variable (``pm.Data``) by name; its initial points
        are the model's, jittered as nutpie does (see :func:`with_initial_points`).
    """
    from nutpie.compile_pymc import _make_functions, _prepare_dims_and_coords
    from nutpie.compiled_pyfunc import from_pyfunc
    from pymc.initial_point import make_initial_point_fn

    point_fn = _locked(
        make_initial_point_fn(model=model, jitter_rvs=set(model.free_RVs), return_transformed=True)
    )
    n_dim, _, logp_pt, expand_pt, init_fn, shape_info, reparameterized = _make_functions(
        model,
        mode=_nogil_numba_mode(),
        compute_grad=True,
        join_expanded=False,
        pymc_initial_point_fn=point_fn,
    )
    logp_jit = logp_pt.vm.jit_fn
    expand_jit = expand_pt.vm.jit_fn
    logp_names = [v.name for v in logp_pt.get_shared()]
    expand_names = [v.name for v in expand_pt.get_shared()]
    shared = {}
    for var in [*logp_pt.get_shared(), *expand_pt.get_shared()]:
        if var.name in shared and shared[var.name] is not var:
            raise ValueError(f"shared variables must have unique names: {var.name}")
        shared[var.name] = var
    names, _, shapes = shape_info

    def make_logp_fn():
        def logp(x, **data):
            value, grad = logp_jit(x, *[data[n] for n in logp_names])
            return float(value), np.asarray(grad, dtype=np.float64, order="C")

        return logp

    def make_expand_fn(seed1, seed2, chain):
        def expand(x, **data):
            values = expand_jit(x, *[data[n] for n in expand_names])
            return {
                name: np.asarray(v, dtype=np.float64, order="C").reshape(shape)
                for name, v, shape in zip(names, values, shapes, strict=True)
            }

        return expand

    dims, coords = _prepare_dims_and_coords(model, shape_info, reparameterized)
    compiled = from_pyfunc(
        ndim=n_dim,
        make_logp_fn=make_logp_fn,
        make_expand_fn=make_expand_fn,
        make_initial_point_fn=init_fn,
        expanded_dtypes=[np.dtype(np.float64)] * len(names),
        expanded_shapes=shapes,
        expanded_names=names,
        shared_data={k: np.asarray(v.get_value()) for k, v in shared.items()},
        dims=dims,
        coords=coords,
        reparameterized_names=reparameterized,
    )
    # Written after construction: nutpie's dataclass is frozen.
    object.__setattr__(compiled, "_rvm_free_names", list(names[: len(model.free_RVs)]))
    object.__setattr__(compiled, "_rvm_free_shapes", list(shapes[: len(model.free_RVs)]))
    return compiled


def with_initial_points(compiled, model, initvals: Mapping | None):
    """The compiled model with the chains started at ``initvals`` (jittered), not recompiled.

    Parameters
    ----------
    compiled : the result of :func:`compile_nutpie` for a model with the same free variables
    model : pymc.Model
    initvals : dict or None
        Initial values by variable name (one dict for all chains); None keeps the model's.
    """
    from nutpie.compile_pymc import _rv_dict_to_flat_array_wrapper
    from pymc.initial_point import make_initial_point_fn

    point_fn = _locked(
        make_initial_point_fn(
            model=model,
            overrides=dict(initvals or {}),
            jitter_rvs=set(model.free_RVs),
            return_transformed=True,
        )
    )
    flat = _rv_dict_to_flat_array_wrapper(
        point_fn, names=compiled._rvm_free_names, shapes=compiled._rvm_free_shapes
    )
    return dataclasses.replace(compiled, _make_initial_points=flat)
