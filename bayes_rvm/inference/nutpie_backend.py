"""nutpie on PyTensor numba functions whose machine code is cached on disk.

``nutpie.compile_pymc_model`` wraps the model's log density in numba C callbacks that embed the
data as dynamic globals, so numba cannot cache them: every new process pays 10-35 s of
compilation. Here the log density and the trace expansion are compiled by PyTensor's numba
backend, whose machine code *is* cached on disk (keyed on the graph), and wrapped in C callbacks
generated from source that read the data through nutpie's user-data pointer: no dynamic global,
so the callbacks are cached on disk too (keyed on the graph's key and the callback's source). A
fresh process loads them in well under a second, and nutpie's chains then run in its own threads
without ever entering Python (a Python callback per gradient costs 2-3x the sampling time, most
of it in handing the GIL between the chains).

A graph PyTensor cannot cache (an Op without a cache key) goes through nutpie's function-based
entry (``nutpie.compiled_pyfunc.from_pyfunc``) on the same PyTensor functions instead, compiled
with ``nogil=True`` so that the chains evaluate their gradients in parallel. This works for any
PyMC model, including one a user built or extended; nothing here depends on the RVM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Mapping
from functools import cache, wraps

import numpy as np

__all__ = ["compile_nutpie", "with_initial_points", "with_model_data"]

#: Bumped when the generated callbacks change: old cache entries are then left unused.
_CALLBACK_VERSION = 1


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


def _initial_point_fn(model, overrides=None):
    """PyMC's jittered initial-point function of ``model``, compiled at its first call.

    Compiling it costs about 0.07 s, and the one that :func:`compile_nutpie` hands to nutpie is
    replaced by :func:`with_initial_points` before every run of :func:`sample_mcmc`.
    """
    from pymc.initial_point import make_initial_point_fn

    overrides = dict(overrides or {})
    compiled = []

    def initial_point(seed=None):
        if not compiled:
            fn = make_initial_point_fn(
                model=model,
                overrides=overrides,
                jitter_rvs=set(model.free_RVs),
                return_transformed=True,
            )
            compiled.append(fn)
        return compiled[0](seed)

    return _locked(initial_point)


def compile_nutpie(model):
    """Compile ``model`` for ``nutpie.sample``, with its machine code cached on disk.

    Parameters
    ----------
    model : pymc.Model

    Returns
    -------
    nutpie compiled model
        Supports ``with_data`` for every shared variable (``pm.Data``) by name; its initial points
        are the model's, jittered as nutpie does (see :func:`with_initial_points`).
    """
    compiled = _compile_cfunc(model)
    if compiled is None:
        compiled = _compile_pyfunc(model)
    return compiled


# ---------------------------------------------------------------------------------------------
# C callbacks cached on disk
# ---------------------------------------------------------------------------------------------
@cache
def _void_pointer():
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    @intrinsic
    def void_pointer(typingctx, address):
        # The integer address of an array (from nutpie's user data) as a pointer numba can read.
        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], cgutils.voidptr_t)

        return types.voidptr(address), codegen

    return void_pointer


def _graph_cache_key(pytensor_fn) -> str | None:
    from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS

    return CACHED_SRC_FUNCTIONS.get(pytensor_fn.vm.jit_fn.py_func)


def _unpack_lines(shared: list[np.ndarray], offset_of: dict) -> list[str]:
    # nutpie's user data (compile_pymc.make_user_data): all 8-byte unsigned integers, the data
    # addresses of the shared arrays, then their sizes, then their shapes.
    lines = [f"    ud = numba.carray(user_data_, ({offset_of['end']},), np.uint64)"]
    for i, value in enumerate(shared):
        start = offset_of[i]
        shape = ", ".join(f"np.intp(ud[{start + j}])" for j in range(value.ndim))
        shape = f"({shape},)" if value.ndim == 1 else f"({shape})"
        lines.append(
            f"    s{i} = numba.carray(void_pointer(ud[{i}]), {shape}, np.{value.dtype.name})"
        )
    return lines


def _guarded_callback(
    signature: str, sizes: list[tuple[str, int]], body: str, work: str, fail: int
) -> str:
    """One C callback's source: nutpie's size checks, the shared arrays unpacked, then ``work``;
    an exception inside returns the error code ``fail``."""
    checks = "".join(f"    if {name} != {n}:\n        return -1\n" for name, n in sizes)
    return f"""
def {signature}:
{checks}    try:
{body}
{work}    except Exception:  # noqa: BLE001
        return {fail}
    return 0
"""


def _callback_sources(n_dim: int, n_expanded: int, logp_shared, expand_shared, offsets):
    """The source of the logp and expand C callbacks (numba.cfunc with nutpie's signatures)."""
    logp_args = ", ".join(["x", *(f"s{offsets['index'][k]}" for k in logp_shared)])
    expand_args = ", ".join(["x", *(f"s{offsets['index'][k]}" for k in expand_shared)])
    unpack = _unpack_lines(offsets["arrays"], offsets)
    body = "\n".join("    " + ln for ln in unpack)
    logp_src = _guarded_callback(
        "nutpie_logp_callback(dim, x_, out_, logp_, user_data_)",
        [("dim", n_dim)],
        body,
        f"""        x = numba.carray(x_, ({n_dim},))
        out = numba.carray(out_, ({n_dim},))
        logp = numba.carray(logp_, ())
        logp_val, grad = logp_fn({logp_args})
        logp[()] = logp_val
        out[...] = grad
        if not np.all(np.isfinite(out)):
            return 3
        if not np.isfinite(logp_val):
            return 4
""",
        1,
    )
    expand_src = _guarded_callback(
        "nutpie_expand_callback(dim, expanded, x_, out_, user_data_)",
        [("dim", n_dim), ("expanded", n_expanded)],
        body,
        f"""        x = numba.carray(x_, ({n_dim},))
        out = numba.carray(out_, ({n_expanded},))
        (values,) = expand_fn({expand_args})
        out[...] = values
""",
        -2,
    )
    return logp_src, expand_src


def _cached_cfunc(src: str, name: str, signature, env: dict, graph_key: str):
    import numba
    from pytensor.link.numba.cache import compile_numba_function_src

    # The module's own name is in the key: numba pickles the callback's environment by it, and
    # an entry written where this module lived elsewhere (an earlier version) would not load.
    digest = hashlib.sha256(
        f"{_CALLBACK_VERSION}\n{__name__}\n{graph_key}\n{numba.__version__}\n{src}".encode()
    ).hexdigest()
    env = {**env, "__name__": __name__}
    py_func = compile_numba_function_src(src, name, env, cache_key=f"bayes_rvm_{digest}")
    return numba.cfunc(signature, cache=True)(py_func)


def _compile_cfunc(model):
    """nutpie's compiled-model class on C callbacks cached on disk; None if they cannot be."""
    import numba
    from nutpie.compile_pymc import (
        CompiledPyMCModel,
        _make_functions,
        _prepare_dims_and_coords,
        make_user_data,
    )

    n_dim, n_expanded, logp_pt, expand_pt, init_fn, shape_info, reparameterized = _make_functions(
        model,
        mode="NUMBA",
        compute_grad=True,
        join_expanded=True,
        pymc_initial_point_fn=_initial_point_fn(model),
    )
    logp_key, expand_key = _graph_cache_key(logp_pt), _graph_cache_key(expand_pt)
    if logp_key is None or expand_key is None:
        return None  # an Op PyTensor cannot cache: the function-based entry instead
    shared_vars: dict = {}
    for var in [*logp_pt.get_shared(), *expand_pt.get_shared()]:
        shared_vars.setdefault(var, None)
    arrays = []
    for var in shared_vars:
        value = var.get_value()
        if not isinstance(value, np.ndarray) or value.dtype.kind not in "biuf":
            return None  # random generators and other non-array data: not through a pointer
        value = np.array(value, order="C", copy=True)
        value.flags.writeable = False
        arrays.append(value)
    index = {var: i for i, var in enumerate(shared_vars)}
    keys = {var: f"s{i}" for i, var in enumerate(shared_vars)}
    shared_data = {keys[var]: arrays[i] for var, i in index.items()}
    user_data = make_user_data(keys, shared_data)
    k = len(arrays)
    offsets: dict = {"arrays": arrays, "index": index}
    start = 2 * k
    for i, value in enumerate(arrays):
        offsets[i] = start
        start += value.ndim
    offsets["end"] = max(start, 1)
    if user_data.dtype.itemsize != 8 * start:  # nutpie changed its layout: do not guess
        return None
    logp_src, expand_src = _callback_sources(
        n_dim, n_expanded, logp_pt.get_shared(), expand_pt.get_shared(), offsets
    )
    env = {"numba": numba, "np": np, "void_pointer": _void_pointer()}
    u64, dptr = numba.types.uint64, numba.types.CPointer(numba.types.double)
    logp_cfunc = _cached_cfunc(
        logp_src,
        "nutpie_logp_callback",
        numba.types.int64(u64, dptr, dptr, dptr, numba.types.voidptr),
        {**env, "logp_fn": logp_pt.vm.jit_fn},
        logp_key,
    )
    expand_cfunc = _cached_cfunc(
        expand_src,
        "nutpie_expand_callback",
        numba.types.int64(u64, u64, dptr, dptr, numba.types.voidptr),
        {**env, "expand_fn": expand_pt.vm.jit_fn},
        expand_key,
    )
    dims, coords = _prepare_dims_and_coords(model, shape_info, reparameterized)
    names, _, shapes = shape_info
    compiled = CompiledPyMCModel(
        _n_dim=n_dim,
        dims=dims,
        _coords=coords,
        _shapes={name: tuple(shape) for name, shape in zip(names, shapes, strict=True)},
        compiled_logp_func=logp_cfunc,
        compiled_expand_func=expand_cfunc,
        initial_point_func=init_fn,
        shared_data=shared_data,
        shared_var_keys=keys,
        user_data=user_data,
        n_expanded=n_expanded,
        shape_info=shape_info,
        logp_func=logp_pt,
        expand_func=expand_pt,
        reparameterized_names=reparameterized,
    )
    return _with_free_names(compiled, model, names, shapes)


# ---------------------------------------------------------------------------------------------
# The function-based entry (graphs PyTensor cannot cache)
# ---------------------------------------------------------------------------------------------
def _compile_pyfunc(model):
    """nutpie's function-based entry on nogil PyTensor numba functions (Python per gradient)."""
    from nutpie.compile_pymc import _make_functions, _prepare_dims_and_coords
    from nutpie.compiled_pyfunc import from_pyfunc

    point_fn = _initial_point_fn(model)
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
    return _with_free_names(compiled, model, names, shapes)


def _with_free_names(compiled, model, names, shapes):
    # Written after construction (nutpie's dataclasses are frozen): what with_initial_points
    # needs to flatten a start; dataclasses.replace keeps them.
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
    from nutpie.compile_pymc import CompiledPyMCModel, _rv_dict_to_flat_array_wrapper

    flat = _rv_dict_to_flat_array_wrapper(
        _initial_point_fn(model, initvals),
        names=compiled._rvm_free_names,
        shapes=compiled._rvm_free_shapes,
    )
    if isinstance(compiled, CompiledPyMCModel):
        new = dataclasses.replace(compiled, initial_point_func=flat)
    else:
        new = dataclasses.replace(compiled, _make_initial_points=flat)
    return _with_free_names(new, model, compiled._rvm_free_names, compiled._rvm_free_shapes)


def with_model_data(compiled, model):
    """The compiled model on ``model``'s current data, not recompiled.

    Parameters
    ----------
    compiled : the result of :func:`compile_nutpie` for a model of the same graph
    model : pymc.Model
        Its shared variables (``pm.Data``) give the new values, by name.
    """
    from nutpie.compile_pymc import CompiledPyMCModel

    if isinstance(compiled, CompiledPyMCModel):
        names = {var.name for var in compiled.shared_var_keys}
    else:
        names = set(compiled._shared_data)
    values = {
        name: np.asarray(var.get_value())
        for name, var in model.named_vars.items()
        if name in names and hasattr(var, "get_value")
    }
    return compiled.with_data(**values)
