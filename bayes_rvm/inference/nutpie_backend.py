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

PyTensor's key is that of the rewritten graph, and rewriting the log density and its gradient
costs about a second in every process. So a compilation also records, under a digest of the graph
*before* rewriting (:func:`_source_graph_key`: the graph node by node, the settings and library
versions that change what it compiles to), the rewritten graphs' keys; a later process computes
the digest (about 0.1 s), finds the record and loads the callbacks with nothing rewritten or
compiled. Graphs with an Op whose code no version pins (another library's) are not recorded.

Nothing compiled holds the data's sizes (:func:`_make_functions`): the flat point is sliced by the
model's dimension lengths, shared variables read at run time like the data, and the callbacks
take their lengths from nutpie. The machine code is compiled once per machine (and model
settings, package and library versions), and a fit on a data shape never seen before loads it.
When numba does compile (a cache miss) the fit says so first, on PyMC's logger
(:data:`COMPILING_MESSAGE`).

The default regression model and the whitened two-class and count models
(:func:`_native_density` recognises them) skip PyTensor altogether: their whole log density is
written in numba (:mod:`bayes_rvm.models.marginal.r2d2_density`,
:mod:`bayes_rvm.models.whitened_density`) and handed to the same callbacks, so that a cold
machine compiles little more than the marginal likelihood's kernels (a cold first fit about half
as long), a warm one loads two callbacks, and a gradient of the whitened models costs a third of
PyTensor's.

A graph PyTensor cannot cache (an Op without a cache key) goes through nutpie's function-based
entry (``nutpie.compiled_pyfunc.from_pyfunc``) on the same PyTensor functions instead, compiled
with ``nogil=True`` so that the chains evaluate their gradients in parallel. This works for any
PyMC model, including one a user built or extended; nothing here depends on the RVM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import operator
import pickle
import threading
from collections.abc import Mapping
from functools import cache, reduce, wraps

import numpy as np

__all__ = [
    "LogDensity",
    "compile_nutpie",
    "has_native_density",
    "log_density",
    "with_initial_points",
    "with_model_data",
]

#: Bumped when the generated callbacks change: old cache entries are then left unused.
_CALLBACK_VERSION = 2

#: What a fit says, once, on standard error (PyMC's logger) when the sampler's machine code is
#: not in the on-disk cache and numba compiles it: on a cold machine the first fit otherwise
#: waits half a minute in silence. Sizes are read at run time, so later fits of any data shape
#: (same model settings) load it.
COMPILING_MESSAGE = (
    "Compiling the sampler for this kind of model, once per machine (up to a minute; later fits "
    "of any data size load it from the disk cache)."
)
#: The same for a model whose graph cannot be cached on disk (an Op without a cache key).
COMPILING_UNCACHED_MESSAGE = (
    "Compiling the sampler for this model (an operation in its graph cannot be cached on disk: "
    "every new process compiles it)."
)


def announce_compilation(cached: bool = True) -> None:
    """Say on PyMC's logger (standard error, as its own progress lines) that numba compiles."""
    message = COMPILING_MESSAGE if cached else COMPILING_UNCACHED_MESSAGE
    logging.getLogger("pymc").info(message)


def _once(fn):
    done = []

    def once(*args, **kwargs):
        if not done:
            done.append(True)
            fn(*args, **kwargs)

    return once


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


def _initial_point_fn(model, overrides=None, *, jitter: bool = True):
    """PyMC's initial-point function of ``model`` (jittered unless ``jitter=False``), compiled
    at its first call.

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
                jitter_rvs=set(model.free_RVs) if jitter else set(),
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
        are the model's, jittered as nutpie does (see :func:`with_initial_points`). Where the
        callbacks were loaded by the digest of the graph (nothing compiled) or are the model's
        own density written in numba (:func:`_native_density`), its ``logp_func`` and
        ``expand_func`` (PyTensor functions nutpie does not call) are None.
    """
    compiled = _compile_cfunc(model)
    if compiled is None:
        compiled = _compile_pyfunc(model)
    return compiled


# ---------------------------------------------------------------------------------------------
# The log density and the trace expansion, with the sizes of the free variables read at run time
# ---------------------------------------------------------------------------------------------
def _symbolic_shape(model, var, shape: tuple[int, ...]) -> tuple:
    """The shape of ``var``'s value as the model's dimension lengths (shared, set at run time).

    A dimension whose length is a shared variable of the current size gives that variable; any
    other (no dims, a fixed length, a transform that changes the shape, a dimension named as a
    variable, which nutpie's ``with_data`` could not tell apart) the number itself, so that the
    graph is right for any model and free of the data's sizes for the RVM's.
    """
    dims = model.named_vars_to_dims.get(var.name) or ()
    if len(dims) != len(shape):
        return shape
    out = []
    for dim, n in zip(dims, shape, strict=True):
        usable = dim is not None and dim not in model.named_vars
        length = model.dim_lengths.get(dim) if usable else None
        value = length.get_value() if hasattr(length, "get_value") else None
        out.append(length if value is not None and int(value) == int(n) else int(n))
    return tuple(out)


@cache
def _elementwise_transforms() -> dict:
    """The transforms whose value keeps its variable's shape, by type, with their forward maps
    in NumPy: none, log and log-odds (the estimators' models use no other)."""
    from pymc.logprob.transforms import LogOddsTransform, LogTransform
    from scipy.special import logit

    return {type(None): lambda x: x, LogTransform: np.log, LogOddsTransform: logit}


def _dims_shapes(model) -> dict[str, tuple[int, ...]] | None:
    """nutpie's ``_compute_shapes`` from the variables' dims and the model's dimension lengths,
    with no PyTensor function compiled (two of them cost 0.1 s of every fit's compile phase);
    None where some traced variable's shape does not follow from them.

    A value variable has its random variable's dims where the transform keeps the shape (none,
    log, log-odds); a scalar needs none.
    """
    observed = set(model.observed_RVs) | set(model.potentials)
    shapes = {}
    for var in model.value_vars + model.free_RVs + model.deterministics:
        if var in observed:
            continue
        owner = model.values_to_rvs.get(var, var)
        if type(model.rvs_to_transforms.get(owner)) not in _elementwise_transforms():
            return None
        dims = model.named_vars_to_dims.get(owner.name) or ()
        if len(dims) != var.ndim:
            return None
        shape = []
        for dim in dims:
            length = model.dim_lengths.get(dim) if dim is not None else None
            if not hasattr(length, "get_value") and not hasattr(length, "data"):
                return None
            shape.append(int(length.get_value() if hasattr(length, "get_value") else length.data))
        if any(n is not None and n != m for n, m in zip(var.type.shape, shape, strict=True)):
            return None
        shapes[var.name] = tuple(shape)
    return shapes


@dataclasses.dataclass
class _Layout:
    """Where each variable lies in nutpie's flat point and trace (nothing compiled).

    ``symbolic`` gives each free variable's shape as the model's dimension lengths where they
    are shared variables (:func:`_symbolic_shape`), ``remaining`` the other traced variables.
    """

    n_dim: int
    n_expanded: int
    free_names: list
    free_shapes: list
    symbolic: list
    remaining: list
    shape_info: tuple
    reparameterized: list


def _layout(model) -> _Layout:
    """The flat point's and the trace's layout of ``model`` at its current data's sizes."""
    shapes = _dims_shapes(model)
    if shapes is None:
        from nutpie.compile_pymc import _compute_shapes

        shapes = _compute_shapes(model)
    names, slices, numeric, symbolic = [], [], [], []
    count = 0
    for var in model.free_RVs:
        value_var = model.rvs_to_values[var]
        shape = tuple(int(n) for n in shapes[value_var.name])
        size = int(np.prod(shape, dtype=np.int64))
        symbolic.append(_symbolic_shape(model, var, shape))
        names.append(value_var.name)
        slices.append(slice(count, count + size))
        numeric.append(shape)
        count += size
    n_dim = count
    remaining = [var for var in model.unobserved_value_vars if var.name not in names]
    all_names, all_slices, all_shapes = list(names), list(slices), list(numeric)
    for var in remaining:
        shape = tuple(int(n) for n in shapes[var.name])
        all_names.append(var.name)
        all_shapes.append(shape)
        size = int(np.prod(shape, dtype=np.int64))
        all_slices.append(slice(count, count + size))
        count += size
    reparameterized = [
        model.rvs_to_values[var].name
        for var in model.free_RVs
        if model.rvs_to_transforms.get(var) is not None
    ]
    return _Layout(
        n_dim=n_dim,
        n_expanded=count,
        free_names=names,
        free_shapes=numeric,
        symbolic=symbolic,
        remaining=remaining,
        shape_info=(all_names, all_slices, all_shapes),
        reparameterized=reparameterized,
    )


def _flat_initial_point_fn(layout: _Layout, pymc_initial_point_fn):
    from nutpie.compile_pymc import _rv_dict_to_flat_array_wrapper

    return _rv_dict_to_flat_array_wrapper(
        pymc_initial_point_fn, names=layout.free_names, shapes=layout.free_shapes
    )


def _make_functions(
    model, *, mode, join_expanded: bool, pymc_initial_point_fn, layout: _Layout | None = None
):
    """``nutpie.compile_pymc._make_functions`` (gradient included) free of the data's sizes.

    nutpie gives the flat point a static length and slices it with constant bounds, and PyTensor
    keys its on-disk cache on the graph with those constants: every new number of basis
    functions compiled again. Here the point is a vector of any length, sliced by the models'
    dimension lengths (shared variables, read at run time through nutpie's user data): one
    compiled function serves every data shape. The arithmetic is nutpie's, term for term.
    """
    import pytensor.tensor as pt
    from pymc.pytensorf import compile as compile_pymc
    from pytensor.graph import clone_replace, rewrite_graph

    layout = _layout(model) if layout is None else layout
    value_vars = [model.rvs_to_values[var] for var in model.free_RVs]
    rewrites = ["canonicalize", "stabilize"]
    if not model.check_bounds:
        rewrites.append("local_remove_check_parameter")
    logp = rewrite_graph(model.logp(), include=rewrites)
    grads = pt.grad(logp, value_vars)
    grad = pt.concatenate([pt.as_tensor(g, allow_xtensor_conversion=True).ravel() for g in grads])

    joined = pt.dvector("_unconstrained_point")
    replacements, variables = {}, []
    start = 0
    for var, value_var, symbolic in zip(model.free_RVs, value_vars, layout.symbolic, strict=True):
        stop = start + (reduce(operator.mul, symbolic) if symbolic else 1)
        piece = joined[start:stop]
        variables.append(piece)
        replacements[value_var] = piece.reshape(symbolic).astype(var.dtype)
        start = stop
    initial_point_fn = _flat_initial_point_fn(layout, pymc_initial_point_fn)
    logp, grad = clone_replace([logp, grad], replacements)
    with model:
        logp_fn = compile_pymc((joined,), (logp, grad), mode=mode)

    remaining = layout.remaining
    if join_expanded:
        outputs = [
            pt.concatenate(
                [
                    *[v.ravel() for v in variables],
                    *[pt.as_tensor(v, allow_xtensor_conversion=True).ravel() for v in remaining],
                ]
            )
        ]
    else:
        outputs = [*variables, *remaining]
    with model:
        expand_fn = compile_pymc((joined,), outputs, givens=list(replacements.items()), mode=mode)
    return (
        layout.n_dim,
        layout.n_expanded,
        logp_fn,
        expand_fn,
        initial_point_fn,
        layout.shape_info,
        layout.reparameterized,
    )


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


def _guarded_callback(signature: str, body: str, work: str, fail: int) -> str:
    """One C callback's source: the shared arrays unpacked, then ``work``; an exception inside
    returns the error code ``fail``."""
    return f"""
def {signature}:
    try:
{body}
{work}    except Exception:  # noqa: BLE001
        return {fail}
    return 0
"""


def _callback_sources(logp_shared, expand_shared, offsets, constants: tuple = ()):
    """The source of the logp and expand C callbacks (numba.cfunc with nutpie's signatures).

    ``constants`` (floats), where given, follow the shared arrays in both calls as one tuple.

    No size is written into them: the point's and the trace's lengths are nutpie's arguments,
    checked against what the graph computes (which reads its sizes from the shared data), so the
    callbacks of one graph serve every data shape. They copy with loops: a slice assignment
    would compile numba's broadcast-error formatting, over a second of a cold fit.
    """
    tail = [f"({', '.join(repr(float(c)) for c in constants)},)"] if constants else []
    logp_args = ", ".join(["x", *(f"s{offsets['index'][k]}" for k in logp_shared), *tail])
    expand_args = ", ".join(["x", *(f"s{offsets['index'][k]}" for k in expand_shared), *tail])
    unpack = _unpack_lines(offsets["arrays"], offsets)
    body = "\n".join("    " + ln for ln in unpack)
    logp_src = _guarded_callback(
        "nutpie_logp_callback(dim, x_, out_, logp_, user_data_)",
        body,
        f"""        x = numba.carray(x_, (dim,))
        out = numba.carray(out_, (dim,))
        logp = numba.carray(logp_, ())
        logp_val, grad = logp_fn({logp_args})
        if grad.shape[0] != dim:
            return -1
        logp[()] = logp_val
        finite = True
        for i in range(dim):
            out[i] = grad[i]
            finite = finite and np.isfinite(grad[i])
        if not finite:
            return 3
        if not np.isfinite(logp_val):
            return 4
""",
        1,
    )
    expand_src = _guarded_callback(
        "nutpie_expand_callback(dim, expanded, x_, out_, user_data_)",
        body,
        f"""        x = numba.carray(x_, (dim,))
        out = numba.carray(out_, (expanded,))
        (values,) = expand_fn({expand_args})
        if values.shape[0] != expanded:
            return -1
        for i in range(expanded):
            out[i] = values[i]
""",
        -2,
    )
    return logp_src, expand_src


def _cached_cfunc(src: str, name: str, signature, env: dict, graph_key: str, on_miss):
    import numba
    from pytensor.link.numba.cache import compile_numba_function_src

    # The module's own name is in the key: numba pickles the callback's environment by it, and
    # an entry written where this module lived elsewhere (an earlier version) would not load.
    digest = hashlib.sha256(
        f"{_CALLBACK_VERSION}\n{__name__}\n{graph_key}\n{numba.__version__}\n{src}".encode()
    ).hexdigest()
    env = {**env, "__name__": __name__}
    py_func = compile_numba_function_src(src, name, env, cache_key=f"bayes_rvm_{digest}")
    # numba.cfunc(signature, cache=True), with the announcement where numba finds no cache entry
    # and compiles (it then compiles the log density under the callback as well).
    from numba.core.ccallback import CFunc
    from numba.core.sigutils import normalize_signature

    cfunc = CFunc(py_func, normalize_signature(signature), locals={}, options={})
    cfunc.enable_caching()
    compile_uncached = cfunc._compile_uncached

    def announced():
        on_miss()
        return compile_uncached()

    cfunc._compile_uncached = announced
    cfunc.compile()
    return cfunc


def _compile_cfunc(model):
    """nutpie's compiled-model class on C callbacks cached on disk; None if they cannot be.

    A model whose graph was compiled before (on this machine, in any process and at any data
    shape) is looked up by :func:`_source_graph_key` and its callbacks loaded from disk with no
    PyTensor rewrite or compilation (:func:`_load_cfunc_model`); otherwise the functions are
    compiled (:func:`_make_functions`) and their cache keys recorded under that key.
    """
    layout = _layout(model)
    native = _native_density(model, layout)
    if native is not None:
        logp, expand, constants = native
        init_fn = _flat_initial_point_fn(layout, _initial_point_fn(model))
        return _cfunc_model(
            model,
            layout,
            init_fn,
            logp=logp,
            expand=expand,
            on_miss=_once(announce_compilation),
            constants=constants,
        )
    keyed = _source_graph_key(model, layout)
    if keyed is not None:
        compiled = _load_cfunc_model(model, layout, *keyed)
        if compiled is not None:
            return compiled
    _, _, logp_pt, expand_pt, init_fn, _, _ = _make_functions(
        model,
        mode="NUMBA",
        join_expanded=True,
        pymc_initial_point_fn=_initial_point_fn(model),
        layout=layout,
    )
    logp_key, expand_key = _graph_cache_key(logp_pt), _graph_cache_key(expand_pt)
    if logp_key is None or expand_key is None:
        return None  # an Op PyTensor cannot cache: the function-based entry instead
    compiled = _cfunc_model(
        model,
        layout,
        init_fn,
        logp=(logp_key, list(logp_pt.get_shared()), logp_pt.vm.jit_fn),
        expand=(expand_key, list(expand_pt.get_shared()), expand_pt.vm.jit_fn),
        on_miss=_once(announce_compilation),
        pytensor_functions=(logp_pt, expand_pt),
    )
    if compiled is not None and keyed is not None:
        _write_manifest(keyed[0], keyed[1], logp_pt, expand_pt, logp_key, expand_key)
    return compiled


class _NotCached(Exception):
    """A callback is not in numba's on-disk cache (it would have to be compiled)."""


def _not_cached():
    raise _NotCached


def _cfunc_model(
    model,
    layout: _Layout,
    init_fn,
    *,
    logp,
    expand,
    on_miss,
    constants: tuple = (),
    pytensor_functions: tuple = (None, None),
):
    """nutpie's compiled-model class on the C callbacks of two numba functions, or None.

    ``logp`` and ``expand`` are each (the function's cache key, such as PyTensor's of its
    rewritten graph; its shared inputs in order; the numba function, or None), each called
    with the tuple ``constants`` after its shared inputs. Without the function the
    callback must be in numba's on-disk cache (``on_miss`` is called where numba would compile).
    ``pytensor_functions`` are the compiled PyTensor functions, where they exist (for the
    compiled model's ``logp_func`` and ``expand_func``, which nutpie does not call).
    """
    import numba
    from nutpie.compile_pymc import CompiledPyMCModel, _prepare_dims_and_coords, make_user_data

    logp_key, logp_shared, logp_fn = logp
    expand_key, expand_shared, expand_fn = expand
    logp_pt, expand_pt = pytensor_functions
    shared_vars: dict = {}
    for var in [*logp_shared, *expand_shared]:
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
    logp_src, expand_src = _callback_sources(logp_shared, expand_shared, offsets, constants)
    env = {"numba": numba, "np": np, "void_pointer": _void_pointer()}
    u64, dptr = numba.types.uint64, numba.types.CPointer(numba.types.double)
    logp_cfunc = _cached_cfunc(
        logp_src,
        "nutpie_logp_callback",
        numba.types.int64(u64, dptr, dptr, dptr, numba.types.voidptr),
        {**env, "logp_fn": logp_fn},
        logp_key,
        on_miss,
    )
    expand_cfunc = _cached_cfunc(
        expand_src,
        "nutpie_expand_callback",
        numba.types.int64(u64, u64, dptr, dptr, numba.types.voidptr),
        {**env, "expand_fn": expand_fn},
        expand_key,
        on_miss,
    )
    dims, coords = _prepare_dims_and_coords(model, layout.shape_info, layout.reparameterized)
    names, _, shapes = layout.shape_info
    compiled = CompiledPyMCModel(
        _n_dim=layout.n_dim,
        dims=dims,
        _coords=coords,
        _shapes={name: tuple(shape) for name, shape in zip(names, shapes, strict=True)},
        compiled_logp_func=logp_cfunc,
        compiled_expand_func=expand_cfunc,
        initial_point_func=init_fn,
        shared_data=shared_data,
        shared_var_keys=keys,
        user_data=user_data,
        n_expanded=layout.n_expanded,
        shape_info=layout.shape_info,
        logp_func=logp_pt,
        expand_func=expand_pt,
        reparameterized_names=layout.reparameterized,
    )
    return _with_free_names(compiled, model, names, shapes)


# ---------------------------------------------------------------------------------------------
# The default regression model without PyTensor
# ---------------------------------------------------------------------------------------------
@cache
def _native_source_digest() -> str | None:
    """A digest of the numba source the native density links in (its callbacks' cache key), or
    None where that source is not on disk."""
    from pathlib import Path

    from bayes_rvm.models import whitened_density
    from bayes_rvm.models.marginal import numba_kernels, r2d2_density

    digest = hashlib.sha256()
    try:
        for module in (r2d2_density, whitened_density, numba_kernels):
            digest.update(Path(module.__file__).read_bytes() + b"\0")
    except (OSError, TypeError):
        return None
    return digest.hexdigest()


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and np.isfinite(value) else None


def has_native_density(model) -> bool:
    """Whether :func:`compile_nutpie` runs ``model`` on a log density written in numba
    (:func:`_native_density`), without PyTensor's graph."""
    return _native_density(model, _layout(model)) is not None


def _native_density(model, layout: _Layout):
    """The ``logp``, ``expand`` and ``constants`` of :func:`_cfunc_model` for a model whose
    whole log density is written in numba (:func:`_native_r2d2`, :func:`_native_whitened`);
    None for any other."""
    spec = getattr(model, "rvm_spec", None)
    if spec is None or _native_source_digest() is None:
        return None
    if spec.form == "whitened":
        return _native_whitened(model, layout, spec)
    return _native_r2d2(model, layout, spec)


def _native_whitened(model, layout: _Layout, spec):
    """The native density of the two-class and count models whitened around a reference
    (:func:`~bayes_rvm.models.graphs.rvm_classification_model` with ``reference``), on
    :mod:`bayes_rvm.models.whitened_density`; None for any other.

    The model must have the half-Cauchy precision hyperprior under its log transform or the
    R2-D2 prior in its Gaussian coordinates, no offset, slab or free intercept, and be
    unextended: the same free variables and trace, one observed variable, no potential.
    """
    from pymc.logprob.transforms import LogOddsTransform, LogTransform

    from bayes_rvm.models import whitened_density
    from bayes_rvm.models.priors import DEFAULT_R2D2
    from bayes_rvm.models.whitening import ConditionalGaussianWhitening

    prior = spec.alpha_prior
    if spec.likelihood not in ("bernoulli", "poisson") or spec.prior != "ard" or prior is None:
        return None
    if spec.slab is not None or spec.intercept_sd is not None or spec.offset is not None:
        return None
    poisson = float(spec.likelihood == "poisson")
    trace = tuple(layout.shape_info[0])
    transforms = [type(model.rvs_to_transforms.get(var)) for var in model.free_RVs]
    if prior.distribution == "HalfCauchyPrecision" and set(prior.parameters) == {"beta"}:
        constants = (_number(prior.parameters["beta"]), poisson)
        known = trace == whitened_density.WHITENED_TRACE and transforms[:1] == [LogTransform]
        fns = (whitened_density.whitened_logp_and_grad, whitened_density.whitened_expand)
    elif prior.distribution == "R2D2Precision":
        parameters = {**DEFAULT_R2D2, **prior.parameters}
        constants = (_number(parameters["r2_a"]), _number(parameters["r2_b"]), poisson)
        known = trace == whitened_density.WHITENED_R2D2_TRACE and transforms[:2] == [
            LogOddsTransform,
            type(None),
        ]
        fns = (
            whitened_density.whitened_r2d2_logp_and_grad,
            whitened_density.whitened_r2d2_expand,
        )
    else:
        return None
    data = ("Phi", "gram_ref", "target_ref", "y_obs", "phi_scale")
    if None in constants or not known or model.potentials or len(model.observed_RVs) != 1:
        return None
    if transforms[-1] is not ConditionalGaussianWhitening:
        return None
    if not all(name in model.named_vars for name in data):
        return None
    key = f"whitened-{fns[0].__name__}-{_native_source_digest()}"
    shared = [model[name] for name in data]
    expand_shared = [model[name] for name in ("gram_ref", "target_ref", "phi_scale")]
    return (key, shared, fns[0]), (key, expand_shared, fns[1]), constants


def _native_r2d2(model, layout: _Layout, spec):
    """The native density of the default regression model, on
    :mod:`bayes_rvm.models.marginal.r2d2_density`; None for any other.

    The model must be what :func:`~bayes_rvm.models.graphs.rvm_regression_model` builds in its
    marginal form under the R2-D2 prior (in Gaussian or ``log alpha`` coordinates, one
    concentration for every column) and half-normal noise, with no
    offset (on the data or a compressed design of them), unextended: the same free variables
    under the same transforms, the same trace, one observed variable and no potential. Its Beta
    and half-normal parameters become constants of the callbacks (one compilation per machine
    for each setting of them, the defaults' first).
    """
    from pymc.logprob.transforms import LogOddsTransform, LogTransform

    from bayes_rvm.models.marginal import r2d2_density
    from bayes_rvm.models.priors import DEFAULT_R2D2

    if (spec.likelihood, spec.prior, spec.form) != ("gaussian", "ard", "marginal"):
        return None
    if spec.offset is not None or spec.noise_sd is not None:
        return None
    r2d2, noise = spec.alpha_prior, spec.noise_prior
    if r2d2 is None or r2d2.distribution != "R2D2Precision" or noise is None:
        return None
    if noise.distribution != "HalfNormal" or set(noise.parameters) - {"sigma"}:
        return None
    r2d2_parameters = {**DEFAULT_R2D2, **r2d2.parameters}
    trace = tuple(layout.shape_info[0])
    gaussian = trace == r2d2_density.R2D2_TRACE
    constants = (
        _number(r2d2_parameters["r2_a"]),
        _number(r2d2_parameters["r2_b"]),
        _number(r2d2_parameters["concentration"]),  # a vector of them: not here
        _number(noise.parameters.get("sigma", 1.0)),  # PyMC's default scale
        float(gaussian),
    )
    if None in constants:
        return None
    transforms = [model.rvs_to_transforms.get(var) for var in model.free_RVs]
    if gaussian:
        known = [type(t) for t in transforms] == [LogOddsTransform, type(None), LogTransform]
    else:
        # log alpha: the R2-D2 prior's own vector log transform (a LogTransform), sigma's log
        known = trace == r2d2_density.R2D2_LOG_ALPHA_TRACE and [
            type(t).__name__ for t in transforms
        ] == ["VectorLog", "LogTransform"]
    if not known or model.potentials:
        return None
    lowrank = spec.marginal == "lowrank"
    rows = ("n_rows",) if "n_rows" in model.named_vars else ()
    data = ("Phi_U", "Phi_VS") if lowrank else ("Phi", "gram")
    data = (*data, "y_obs", "phi_scale", "y_scale", *rows)
    if len(model.observed_RVs) != 1 or not all(name in model.named_vars for name in data):
        return None
    # The observed y's inputs: its generator and size, then exactly the density's parameters
    # (log alpha, log beta, Phi, its factors or Gram matrix, the offset; the row count of a
    # compressed design).
    inputs = model.observed_RVs[0].owner.inputs
    if len(inputs) != 6 + (2 if lowrank else 1) + len(rows):
        return None
    if rows and inputs[-1] is not model["n_rows"]:
        return None
    fn = {
        (True, False): r2d2_density.lowrank_r2d2_logp,
        (False, False): r2d2_density.dense_r2d2_logp,
        (True, True): r2d2_density.lowrank_r2d2_rows_logp,
        (False, True): r2d2_density.dense_r2d2_rows_logp,
    }[lowrank, bool(rows)]
    key = f"r2d2-{fn.__name__}-{_native_source_digest()}"
    shared = [model[name] for name in data]
    expand_shared = [model["phi_scale"], model["y_scale"]]
    return (key, shared, fn), (key, expand_shared, r2d2_density.r2d2_expand), constants


# ---------------------------------------------------------------------------------------------
# Compiled graphs looked up before PyTensor's rewrites
# ---------------------------------------------------------------------------------------------
#: Bumped when what :func:`_source_graph_key` hashes or the manifests hold changes.
_MANIFEST_VERSION = 1

#: Modules whose Ops may appear in a graph looked up by :func:`_source_graph_key`: their code is
#: pinned by the versions (PyTensor, PyMC) or the source digest (this package) in the key.
_KEYED_OP_MODULES = ("pytensor.", "pymc.", "bayes_rvm.")

#: The PyTensor settings that change how a graph is rewritten or compiled.
_KEYED_CONFIG = (
    "floatX",
    "cast_policy",
    "mode",
    "linker",
    "optimizer",
    "optimizer_excluding",
    "optimizer_including",
    "optimizer_requiring",
    "tensor__cmp_sloppy",
    "check_input",
    "numba__fastmath",
    "numba__cache",
)


class _Unkeyable(Exception):
    """The graph holds something :func:`_source_graph_key` cannot vouch for."""


@cache
def _package_digest() -> str | None:
    """A digest of this package's Python source (its Ops' numba code and the graphs' builders),
    or None where the source is not on disk (then nothing is looked up)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    paths = sorted(root.rglob("*.py"))
    if Path(__file__).resolve() not in paths:
        return None
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _pinned(module) -> bool:
    # Code the digest pins: by a version in it (NumPy, Python's builtins too) or by source.
    module = str(module)
    return module in ("numpy", "builtins") or module.startswith((*_KEYED_OP_MODULES, "numpy."))


def _check_op(op) -> None:
    """Raise :class:`_Unkeyable` where ``op``, an Op it holds (an Elemwise's scalar Op, a
    Blockwise's core Op, an inner graph's Ops) or a Python function or class it holds comes from
    a module outside :data:`_KEYED_OP_MODULES`: pickling names such code, it does not hold it."""
    import types

    from pytensor.graph.op import Op

    if not type(op).__module__.startswith(_KEYED_OP_MODULES):
        raise _Unkeyable(type(op))
    for value in getattr(op, "__dict__", {}).values():
        if isinstance(value, Op):
            _check_op(value)
        elif isinstance(value, types.FunctionType | type) and not _pinned(value.__module__):
            raise _Unkeyable(value)
    fgraph = getattr(op, "fgraph", None)
    for node in getattr(fgraph, "apply_nodes", ()):
        _check_op(node.op)


class _GraphDigest:
    """The running digest of :func:`_source_graph_key`: every part in order, each variable
    numbered at its first appearance, the shared variables by name."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.shared: dict = {}
        self.index: dict = {}

    def put(self, *parts) -> None:
        self.digest.update(repr(parts).encode() + b"\0")

    def put_bytes(self, data: bytes) -> None:
        self.digest.update(len(data).to_bytes(8, "little") + data)

    def add_shared(self, var) -> None:
        if self.shared.setdefault(var.name, var) is not var:
            raise _Unkeyable(var.name)

    def add_root(self, var) -> None:
        from pytensor.compile.sharedvalue import SharedVariable
        from pytensor.graph.basic import Constant

        self.index[var] = len(self.index)
        if isinstance(var, Constant):
            data = var.data
            if isinstance(data, np.ndarray | np.generic | int | float | bool):
                array = np.asarray(data)
                self.put("constant", repr(var.type), array.dtype.str, array.shape)
                self.put_bytes(np.ascontiguousarray(array).tobytes())
            else:
                self.put("constant", repr(var.type), type(data).__qualname__)
                self.put_bytes(pickle.dumps(data, protocol=5))
        elif isinstance(var, SharedVariable):
            self.add_shared(var)
            self.put("shared", repr(var.type), var.name)
        else:
            self.put("input", repr(var.type), var.name)

    def add_free(self, model, layout: _Layout) -> None:
        """The free variables' names, types and shapes as :func:`_make_functions` slices them."""
        from pytensor.compile.sharedvalue import SharedVariable

        for var, symbolic in zip(model.free_RVs, layout.symbolic, strict=True):
            value_var = model.rvs_to_values[var]
            self.index[value_var] = len(self.index)
            sizes = []
            for n in symbolic:
                if isinstance(n, SharedVariable):
                    self.add_shared(n)
                    sizes.append(("shared", repr(n.type), n.name))
                else:
                    sizes.append(int(n))
            self.put("free", value_var.name, repr(value_var.type), str(var.dtype), sizes)

    def add_graph(self, outputs: list) -> None:
        """Every node of the graph of ``outputs``: its Op pickled whole, its inputs' numbers."""
        from pytensor.graph.traversal import toposort

        for node in toposort(outputs):
            for var in node.inputs:
                if var not in self.index:
                    self.add_root(var)
            _check_op(node.op)
            self.put_bytes(pickle.dumps(node.op, protocol=5))
            self.put("node", [self.index[var] for var in node.inputs])
            for var in node.outputs:
                self.index[var] = len(self.index)
                self.put("output", repr(var.type))
        for var in outputs:
            if var not in self.index:
                self.add_root(var)
        self.put("outputs", [self.index[var] for var in outputs])


def _source_graph_key(model, layout: _Layout) -> tuple[str, dict] | None:
    """A digest of everything the compiled callbacks of ``model`` depend on, before rewriting.

    The un-rewritten log density and traced variables, node by node (each Op pickled whole: its
    type and every parameter; constants by value; shared variables and inputs by type and name),
    the free variables' names, dtypes and shapes as :func:`_make_functions` slices them, the
    model's bound checks, PyTensor's settings that change rewriting or code generation, and the
    versions of Python, NumPy, numba, PyTensor, PyMC, nutpie and this package's source. What
    :func:`_make_functions` does next is a function of these alone, so two graphs with one
    digest compile to the same callbacks. Data values and sizes are not in it: the callbacks
    read them at run time.

    Returns
    -------
    (str, dict) or None
        The digest and the graph's shared variables by name; None for a graph with an Op from
        another library (whose code no version here pins), an Op that cannot be pickled, or two
        shared variables of one name.
    """
    import sys
    from importlib.metadata import version

    import numba
    import pytensor

    key = _GraphDigest()
    try:
        if _package_digest() is None:
            raise _Unkeyable("source")
        key.put(
            "versions",
            _MANIFEST_VERSION,
            _CALLBACK_VERSION,
            sys.version,
            np.__version__,
            numba.__version__,
            pytensor.__version__,
            version("pymc"),
            version("nutpie"),
            _package_digest(),
        )
        key.put("config", [(name, str(getattr(pytensor.config, name))) for name in _KEYED_CONFIG])
        key.put("check_bounds", bool(model.check_bounds))
        key.add_free(model, layout)
        key.put("remaining", [var.name for var in layout.remaining])
        key.add_graph([model.logp(), *layout.remaining])
    except (
        _Unkeyable,
        pickle.PicklingError,
        TypeError,
        AttributeError,
        ValueError,
        RecursionError,
    ):
        return None
    return key.digest.hexdigest(), key.shared


def _manifest_path(key: str):
    from pathlib import Path

    from pytensor import config

    return Path(config.base_compiledir) / "bayes_rvm_nutpie" / f"{key}.json"


def _write_manifest(key, shared, logp_pt, expand_pt, logp_key, expand_key) -> None:
    """Record the rewritten graphs' cache keys and shared inputs (by name) under ``key``."""
    import json
    import os

    entry = {"logp_key": logp_key, "expand_key": expand_key}
    for name, fn in (("logp_shared", logp_pt), ("expand_shared", expand_pt)):
        inputs = list(fn.get_shared())
        if any(shared.get(var.name) is not var for var in inputs):
            return  # a shared input the digest does not name: nothing to look up by
        entry[name] = [var.name for var in inputs]
    path = _manifest_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_text(json.dumps(entry))
        os.replace(part, path)
    except OSError:
        pass  # a read-only cache: the next process compiles again


def _load_cfunc_model(model, layout: _Layout, key: str, shared: dict):
    """The compiled model from the callbacks recorded under ``key``, or None.

    None where nothing is recorded, or where numba's cache no longer holds a callback (then
    nothing is compiled here: :func:`_compile_cfunc` takes the full path).
    """
    import json

    try:
        entry = json.loads(_manifest_path(key).read_text())
        logp_shared = [shared[name] for name in entry["logp_shared"]]
        expand_shared = [shared[name] for name in entry["expand_shared"]]
        logp_key, expand_key = str(entry["logp_key"]), str(entry["expand_key"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    init_fn = _flat_initial_point_fn(layout, _initial_point_fn(model))
    try:
        return _cfunc_model(
            model,
            layout,
            init_fn,
            logp=(logp_key, logp_shared, None),
            expand=(expand_key, expand_shared, None),
            on_miss=_not_cached,
        )
    except _NotCached:
        return None


# ---------------------------------------------------------------------------------------------
# The function-based entry (graphs PyTensor cannot cache)
# ---------------------------------------------------------------------------------------------
def _compile_pyfunc(model):
    """nutpie's function-based entry on nogil PyTensor numba functions (Python per gradient)."""
    from nutpie.compile_pymc import _prepare_dims_and_coords
    from nutpie.compiled_pyfunc import from_pyfunc

    point_fn = _initial_point_fn(model)
    n_dim, _, logp_pt, expand_pt, init_fn, shape_info, reparameterized = _make_functions(
        model,
        mode=_nogil_numba_mode(),
        join_expanded=False,
        pymc_initial_point_fn=point_fn,
    )
    if _graph_cache_key(logp_pt) is None:
        # Not on disk: numba compiles its functions at their first call, in every process.
        announce_compilation(cached=False)
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


def _numpy_initial_point(model, initvals: Mapping | None, names: list, shapes: list):
    """PyMC's jittered initial point, computed in NumPy, where ``initvals`` gives every free
    variable a value of its shape under a transform of a known form (none, log, log-odds); None
    otherwise.

    The same start as :func:`_initial_point_fn`'s (the values on the transformed scale plus a
    U(-1, 1) jitter), its jitter drawn from NumPy's generator of the chain's seed instead of
    PyTensor's, with no PyTensor function compiled (0.05-0.17 s of every fit). Thread-safe:
    nutpie asks from its chains' threads.
    """
    forward = _elementwise_transforms()
    values = []
    for var, shape in zip(model.free_RVs, shapes, strict=True):
        value = (initvals or {}).get(var.name)
        transform = type(model.rvs_to_transforms.get(var))
        if value is None or transform not in forward:
            return None
        try:
            value = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):  # a strategy ("prior", "support_point") or a variable
            return None
        if value.shape != tuple(shape):
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            values.append(forward[transform](value))

    def initial_point(seed=None) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {
            name: v + rng.uniform(-1.0, 1.0, v.shape) for name, v in zip(names, values, strict=True)
        }

    return initial_point


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

    names, shapes = compiled._rvm_free_names, compiled._rvm_free_shapes
    point = _numpy_initial_point(model, initvals, names, shapes)
    flat = _rv_dict_to_flat_array_wrapper(
        point or _initial_point_fn(model, initvals), names=names, shapes=shapes
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
    # The dimension lengths too: the compiled graph reads the free variables' sizes from them.
    found = {**model.dim_lengths, **model.named_vars}
    values = {
        name: np.asarray(var.get_value())
        for name, var in found.items()
        if name in names and hasattr(var, "get_value")
    }
    return compiled.with_data(**values)


# ---------------------------------------------------------------------------------------------
# The compiled log density called from Python (variational inference)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class LogDensity:
    """The compiled model's log density, its gradient and the trace expansion, from Python.

    What an optimiser in Python needs of the flat unconstrained point of :func:`compile_nutpie`
    (no PyTensor graph is rewritten or compiled for it): ``logp(x, grad)`` returns the model's
    joint log density with the transforms' Jacobian (``model.logp()``) at ``x`` and writes its
    gradient into ``grad`` (both C-contiguous float64 of length ``n_dim``); ``expand(x)`` gives
    every traced variable by name (the free values, the constrained variables, the
    deterministics), and ``start(overrides)`` the model's initial point, not jittered, with
    ``overrides`` by variable name.
    """

    n_dim: int
    #: Names of the free value variables, in the flat point's order, with their shapes.
    free_names: list
    free_shapes: list
    logp: object
    expand: object
    start: object


def log_density(compiled, model) -> LogDensity:
    """The :class:`LogDensity` of ``compiled`` (:func:`compile_nutpie`) on ``model``'s data.

    The C callbacks are called through their ctypes entries with nutpie's user data (a few
    microseconds a call); the function-based entry's PyTensor numba functions directly.
    """
    from nutpie.compile_pymc import CompiledPyMCModel, _rv_dict_to_flat_array_wrapper

    names, shapes = compiled._rvm_free_names, compiled._rvm_free_shapes

    def start(overrides=None) -> np.ndarray:
        point_fn = _initial_point_fn(model, overrides, jitter=False)
        return _rv_dict_to_flat_array_wrapper(point_fn, names=names, shapes=shapes)(0)

    data = with_model_data(compiled, model)
    callers = _cfunc_callers if isinstance(data, CompiledPyMCModel) else _pyfunc_callers
    logp, expand = callers(data)
    return LogDensity(
        n_dim=int(data.n_dim),
        free_names=list(names),
        free_shapes=list(shapes),
        logp=logp,
        expand=expand,
        start=start,
    )


def _cfunc_callers(compiled):
    """``logp(x, grad)`` and ``expand(x)`` on the C callbacks of a :class:`CompiledPyMCModel`."""
    import ctypes

    address = ctypes.c_void_p
    logp_c = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, address, address, address, address)(
        compiled.compiled_logp_func.address
    )
    expand_c = ctypes.CFUNCTYPE(
        ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64, address, address, address
    )(compiled.compiled_expand_func.address)
    # The user data holds the addresses of the arrays in shared_data: both live with the callers.
    held = (compiled.user_data, compiled.shared_data)
    user_data = compiled.user_data.ctypes.data
    n_dim, n_expanded = int(compiled.n_dim), int(compiled.n_expanded)
    names, slices, shapes = compiled.shape_info
    value = np.zeros(1)

    def logp(x: np.ndarray, grad: np.ndarray) -> float:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.size != n_dim or grad.size != n_dim or not _writable_doubles(grad):
            raise ValueError(f"logp takes two C-contiguous float64 arrays of {n_dim} numbers.")
        code = logp_c(n_dim, x.ctypes.data, grad.ctypes.data, value.ctypes.data, user_data)
        if code in (0, 3, 4):  # 3, 4: a non-finite gradient or density, written all the same
            return float(value[0])
        if code == 1:  # the graph raised (a failed check): no density here
            grad[:] = np.nan
            return np.nan
        raise RuntimeError(f"the compiled log density failed (code {code}) on {n_dim} numbers")

    def expand(x: np.ndarray) -> dict:
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.size != n_dim:
            raise ValueError(f"expand takes {n_dim} numbers, got {x.size}.")
        out = np.empty(n_expanded)
        code = expand_c(n_dim, n_expanded, x.ctypes.data, out.ctypes.data, user_data)
        if code:
            raise RuntimeError(f"the compiled trace expansion failed (code {code})")
        return {
            name: out[slc].reshape(shape)
            for name, slc, shape in zip(names, slices, shapes, strict=True)
        }

    logp.held = expand.held = held
    return logp, expand


def _writable_doubles(a: np.ndarray) -> bool:
    return a.dtype == np.float64 and a.flags.c_contiguous and a.flags.writeable


def _pyfunc_callers(compiled):
    """``logp(x, grad)`` and ``expand(x)`` on the functions of nutpie's function-based entry."""
    logp_fn = compiled._make_logp_func()
    expand_fn = compiled._make_expand_func(0, 0, 0)
    data = compiled._shared_data

    def logp(x: np.ndarray, grad: np.ndarray) -> float:
        value, gradient = logp_fn(x, **data)
        grad[:] = gradient
        return float(value)

    def expand(x: np.ndarray) -> dict:
        return expand_fn(x, **data)

    return logp, expand
