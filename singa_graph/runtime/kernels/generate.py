"""Kernels generated from the scalar formulas of :mod:`singa_graph.ops.formulas`.

A *program* is what one generated kernel computes per element: a tuple of steps
``(formula name, operand refs)``, where a ref ``i >= 0`` is input ``i`` of the kernel and a
ref ``-j - 1`` the result of step ``j``; the kernel stores the last step's result. A single
elementwise op is a program of one step, a fused chain one of several (:mod:`...passes.fuse`).
The op attributes of each step (``a``, ``g``) are launch arguments, not part of the code, so
one kernel serves every op or chain with the same formulas.

The kernels are written as Python source into a module file of their own, named by a digest
of that source, under :func:`source_dir`: numba's on-disk cache (``cache=True``) needs a real
source file, and a closure over the formulas could not be cached (the closed-over
dispatchers pickle with a per-process id, so the cache would miss in every process). The
source holds the formulas' own text, so editing a formula makes a new file, never a stale
cache entry. Each file is imported once per process and its kernels compiled per dtype.
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import tempfile
import threading

import numpy as np

from ...errors import UnsupportedOpError
from ...ops import formulas as F

PACKAGE = "singa_graph.runtime.kernels.generated"

# re-entrant: a generated module's imports (the CPU kernels package, on first use) may
# generate and load modules of their own while it loads
_lock = threading.RLock()
_modules: dict = {}  # source digest -> module; a memo of compiled code, like numba's own


def source_dir() -> str:
    """Where generated kernel sources (and numba's cache of them) live: ``$SINGA_GRAPH_KERNELS``,
    else ``~/.cache/singa_graph/kernels``, else a folder in the temporary directory."""
    for d in (os.environ.get("SINGA_GRAPH_KERNELS"),
              os.path.join(os.path.expanduser("~"), ".cache", "singa_graph", "kernels"),
              os.path.join(tempfile.gettempdir(), f"singa_graph_kernels_{os.getuid()}")):
        if not d:
            continue
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            return d
    raise OSError("no writable folder for generated kernels: set SINGA_GRAPH_KERNELS")


def single(name: str) -> tuple:
    """The program of one formula applied to the kernel's inputs in order."""
    return ((name, tuple(range(F.arity(name)))),)


def n_inputs(program) -> int:
    return 1 + max(r for _, refs in program for r in refs)


def signature(program) -> str:
    """A readable, canonical text of ``program`` (the key generated kernels are cached by)."""
    return ";".join(f"{n}({','.join(map(str, refs))})" for n, refs in program)


# ---------------------------------------------------------------------- source text
def _formula_source(program) -> str:
    names, todo = [], [n for n, _ in program]
    while todo:
        n = todo.pop()
        if n not in F.FORMULAS:
            raise UnsupportedOpError(f"no elementwise formula named {n!r}")
        if n not in names:
            names.append(n)
            todo.extend(F.CALLS.get(n, ()))
    return "\n\n".join(inspect.getsource(F.FORMULAS[n]) for n in sorted(names)), sorted(names)


def _body(program, read, indent) -> list[str]:
    """Lines computing the program from the values ``v<i>`` (``read(i)`` loads input i)."""
    pad = " " * indent
    lines = [f"{pad}v{i} = {read(i)}" for i in range(n_inputs(program)) if read(i)]
    for j, (name, refs) in enumerate(program):
        args = ", ".join(f"v{r}" if r >= 0 else f"t{-r - 1}" for r in refs)
        lines.append(f"{pad}t{j} = {name}({args}, p[{2 * j}], p[{2 * j + 1}], k)")
    return lines


#: how generated CPU code imports the vectorisable exp and erf (cpu/vexp.py,
#: cpu/vecmath.py) that replace math.exp and math.erf
_CPU_EXP = ("from singa_graph.runtime.kernels.cpu.vexp import exp as vexp\n"
            "from singa_graph.runtime.kernels.cpu.vecmath import erf as verf")


#: Numba options of generated CPU code: IEEE division (x/0 is inf or NaN, as in numpy and on
#: the GPU) instead of a zero test that raises, which kept every loop with a division (the
#: sigmoid's) from vectorising: a fused SiLU cost 9 ns per element with it, 0.x without.
#: No fast-math, said explicitly: a Numba function that leaves it unset inherits the
#: fast-math flags of the first caller that compiles it, and that one compiled version
#: then serves every caller (and the on-disk cache). A formula first compiled inside a
#: kernel with ``contract`` (the 1x1-conv dot products) fused HardSigmoid's multiply-add,
#: and the conv epilogue's HardSwish stopped matching the HardSwish op by one ulp.
_CPU_FLAGS = 'error_model="numpy", fastmath=False'


def _cpu_math(formulas: str) -> str:
    """The formulas' text for the CPU: ``math.exp`` -> :func:`.cpu.vexp.exp` and
    ``math.erf`` -> :func:`.cpu.vecmath.erf`, which LLVM vectorises (libm's are called one
    element at a time: the Div+Erf+Add+Mul+Mul chain that torch exports for GELU took 19%
    of convnext_tiny's inference, 6x onnxruntime's fused Gelu)."""
    return formulas.replace("math.exp(", "vexp(").replace("math.erf(", "verf(")


def _cpu_source(program, kinds: str, ndim: int) -> str:
    """``serial`` and ``parallel`` loops over ``ndim``-d views; kind ``s`` marks a
    one-element input read once, ``f`` one indexed like the output, ``y`` one that is the
    output itself (read from ``y``: LLVM's vectorised loop is guarded by a test that the
    input and output do not overlap, and an in-place step, which plans make wherever an
    input dies there, failed it and ran the scalar loop: torch's GELU chain in place at
    7 ns per element, out of place at 0.45)."""
    idx = ", ".join(f"i{d}" for d in range(ndim))

    def nest(rng):
        out = [f"{'    ' * (d + 1)}for i{d} in {rng if d == 0 else 'range'}(y.shape[{d}]):"
               for d in range(ndim)]
        body = _body(program, lambda i: f"x{i}[{idx}]" if kinds[i] == "f" else
                     f"y[{idx}]" if kinds[i] == "y" else "",
                     4 * (ndim + 1))
        return out + body + [f"{'    ' * (ndim + 1)}y[{idx}] = t{len(program) - 1}"]
    return _cpu_module(program, kinds, (), nest)


def _cpu_module(program, kinds: str, extra, nest) -> str:
    """A module of the program's formulas compiled for the CPU and a ``serial`` and a
    ``parallel`` function ``(x0, ..., y, p, k, *extra)`` running the loop nest
    ``nest(rng)`` (``rng`` the outer loop's range: ``prange`` in the parallel one), after
    reading each one-element input (kind ``s``) once."""
    formulas, names = _formula_source(program)
    args = ", ".join([f"x{i}" for i in range(len(kinds))] + ["y", "p", "k", *extra])
    out = ["import math", "from numba import njit, prange, uintp", _CPU_EXP, "",
           _cpu_math(formulas), ""]
    out += [f"{n} = njit({_CPU_FLAGS})({n})" for n in names]
    for kind, rng in (("serial", "range"), ("parallel", "prange")):
        par = ", parallel=True" if kind == "parallel" else ""
        out += ["", "", f"@njit(cache=True, {_CPU_FLAGS}{par})", f"def {kind}({args}):"]
        out += [f"    v{i} = x{i}[0]" for i, c in enumerate(kinds) if c == "s"]
        out += nest(rng)
    return "\n".join(out) + "\n"


def _cpu_rows_source(program, kinds: str, ndim: int) -> str:
    """:func:`_cpu_source` over flat C-contiguous arrays, for broadcasts whose innermost
    dimension every operand walks contiguously (kind ``c``) or not at all (``r``: one
    value per row, read before the row's loop); kind ``y`` is the output itself, read from
    ``y`` (see :func:`_cpu_source`). ``st[i]`` holds operand ``i``'s element
    strides over the outer dimensions (the last row: the output's). Numba types the
    strided views of :func:`_cpu_source` as arrays of any layout, whose inner loop LLVM
    left scalar: a squeeze-and-excitation gate's Mul, ``(N, H, W, C) * (N, 1, 1, C)``, at
    0.33 ns per element."""
    outer = ndim - 1
    flat = [i for i, c in enumerate(kinds) if c != "s"]
    pad = "    " * (outer + 1)

    def nest(rng):
        out = [f"{'    ' * (d + 1)}for i{d} in {rng if d == 0 else 'range'}(shape[{d}]):"
               for d in range(outer)]
        for n, i in enumerate(flat + [len(kinds)]):
            terms = " + ".join(f"i{d} * st[{n}, {d}]" for d in range(outer)) or "0"
            out.append(f"{pad}o{i} = uintp({terms})")  # unsigned: no wraparound test
        out += [f"{pad}w{i} = x{i}[o{i}]" for i, c in enumerate(kinds) if c == "r"]
        out.append(f"{pad}for j in range(shape[{outer}]):")
        body = _body(program, lambda i: f"x{i}[o{i} + uintp(j)]" if kinds[i] == "c" else
                     f"w{i}" if kinds[i] == "r" else
                     f"y[o{len(kinds)} + uintp(j)]" if kinds[i] == "y" else "", len(pad) + 4)
        return out + body + [f"{pad}    y[o{len(kinds)} + uintp(j)] = t{len(program) - 1}"]
    return _cpu_module(program, kinds, ("shape", "st"), nest)


def _cuda_source(program, kinds: str) -> str:
    """One grid-stride ``kernel``: kind ``f`` reads the flat input at ``i``, ``s`` its one
    element, ``b`` the element numpy broadcasting maps ``i`` to (shape and strides padded,
    as in :mod:`.cuda.launch`)."""
    formulas, names = _formula_source(program)
    xs = [f"x{i}" for i in range(len(kinds))]
    strided = [i for i, c in enumerate(kinds) if c == "b"]
    extra = "".join([", shape"] + [f", s{i}" for i in strided]) if strided else ""

    def read(i):
        c = kinds[i]
        return f"x{i}[i]" if c == "f" else f"x{i}[0]" if c == "s" else \
            f"x{i}[offset_of(i, shape, s{i})]"

    out = ["import math", "from numba import cuda",
           "from singa_graph.runtime.kernels.cuda.launch import offset_of", "", formulas, ""]
    out += [f"{n} = cuda.jit(device=True)({n})" for n in names]
    out += ["", "", "@cuda.jit(cache=True)", f"def kernel({', '.join(xs)}, y, p, k{extra}):",
            "    for i in range(cuda.grid(1), y.shape[0], cuda.gridsize(1)):"]
    out += _body(program, read, 8) + [f"        y[i] = t{len(program) - 1}"]
    return "\n".join(out) + "\n"


def compiled_formulas(names, target: str):
    """A module whose attributes ``names`` (and the formulas they call) are compiled for
    ``target``: ``"cpu"`` (``njit``, callable from other ``njit`` code) or ``"cuda"`` (device
    functions). For kernels that are not elementwise programs, such as a convolution's
    fused epilogue, to apply the same formulas as the elementwise ops they replace."""
    formulas, all_names = _formula_source(tuple((n, ()) for n in names))
    if target == "cpu":
        head, wrap = ["import math", "from numba import njit", _CPU_EXP], f"njit(cache=True, {_CPU_FLAGS})"
        formulas = _cpu_math(formulas)
    elif target == "cuda":
        head, wrap = ["import math", "from numba import cuda"], "cuda.jit(device=True)"
    else:
        raise ValueError(f"unknown target {target!r}: cpu or cuda")
    lines = head + ["", formulas, ""] + [f"{n} = {wrap}({n})" for n in all_names]
    return load("\n".join(lines) + "\n", f"formulas_{target}")


def load(source: str, prefix: str):
    """The module of generated ``source``, written to its file and imported once."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    with _lock:
        mod = _modules.get(digest)
        if mod is not None:
            return mod
        name = f"{prefix}_{digest}"
        path = os.path.join(source_dir(), name + ".py")
        if not os.path.exists(path):  # rewriting it would change its time stamp: a cache miss
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            with open(tmp, "w") as f:
                f.write(source)
            os.replace(tmp, path)
        full = f"{PACKAGE}.{name}"
        spec = importlib.util.spec_from_file_location(full, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[full] = mod
        spec.loader.exec_module(mod)
        _modules[digest] = mod
        return mod


# ---------------------------------------------------------------------- steps
def params(values, dtype) -> tuple:
    """The per-step ``(a, g)`` pairs of a program flattened into a tuple of ``dtype``."""
    t = np.dtype(dtype).type
    return tuple(t(v) for pair in values for v in pair)


def _collapse(shape, strides):
    """Merge dimensions that every operand walks contiguously (and drop ones of size 1):
    ``(shape, [strides per operand])`` of as few dimensions as the broadcast allows."""
    dims = [(n, [s[d] for s in strides]) for d, n in enumerate(shape) if n != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    out = [dims[0]]
    for n, st in dims[1:]:
        m, prev = out[-1]
        if all(p == s * n for p, s in zip(prev, st)):
            out[-1] = (m * n, st)
        else:
            out.append((n, st))
    return tuple(n for n, _ in out), [tuple(st[k] for _, st in out) for k in range(len(strides))]


def cpu_step(program, values, ins, out):
    """The step running ``program`` with per-step attributes ``values`` over numpy arrays
    ``ins`` (broadcast to ``out``, any strides) into ``out``."""
    from numpy.lib.stride_tricks import as_strided

    dt = out.dtype
    if out.size == 0:
        return lambda: None
    kinds, arrays, st = [], [], []
    for x in ins:
        if x.size == 1:
            kinds.append("s")
            arrays.append(x.reshape(1))
        else:
            b = np.broadcast_to(x, out.shape)
            same = (b.strides == out.strides and b.ctypes.data == out.ctypes.data
                    and "y" not in kinds)
            kinds.append("y" if same else "f")
            arrays.append(b)
            st.append(b.strides)
    shape, cst = _collapse(out.shape, st + [out.strides])
    rows = _rows_step(program, values, kinds, arrays, out, shape, cst)
    if rows is not None:
        return rows
    views, it = [], iter(cst)
    for kind, a in zip(kinds, arrays):
        views.append(a if kind == "s" else as_strided(a, shape, next(it), writeable=False))
    y = as_strided(out, shape, next(it))
    source = _cpu_source(program, "".join(kinds), len(shape))
    mod = load(source, "cpu")
    fn = mod.parallel if _heavy(source, out.size) else mod.serial
    p, k = params(values, dt), F.constants(dt)
    return _bound(fn, *views, y, p, k)


def _bound(fn, *args):
    """The step ``fn(*args)`` calling the compiled version directly (cpu/loops.bound): a
    dispatcher typing the parameter tuples on every call took about 1 us of a 1.3 us step
    (mobilenet_v3_small's HardSigmoids on 32 elements)."""
    from .cpu.loops import bound

    return bound(fn, *args)


def _heavy(source: str, size: int) -> bool:
    """Threads only where the math is heavy: a memory-bound loop gains little from a second
    core and loses much when the machine is busy (waking the pool, waiting for a core)."""
    from .cpu.loops import PARALLEL_WORK

    return ("math." in source or "vexp(" in source) and size >= PARALLEL_WORK


def _rows_step(program, values, kinds, arrays, out, shape, cst):
    """The :func:`_cpu_rows_source` step where it applies (a broadcast of two or more
    collapsed dimensions, every array's inner stride one element or zero, the output's
    one), else None."""
    from numpy.lib.stride_tricks import as_strided

    isz = out.itemsize
    flat = [a for c, a in zip(kinds, arrays) if c != "s"]  # the output's own ("y") too
    if len(shape) < 2 or not any(c == "f" for c in kinds):
        return None
    el = [tuple(v // isz for v in s) for s in cst]
    if (any(v % isz or v < 0 for s in cst for v in s) or el[-1][-1] != 1
            or any(s[-1] not in (0, 1) for s in el)):
        return None
    views = []
    for a, s in zip(flat + [out], el):  # each operand's elements as one flat array
        span = 1 + sum((n - 1) * v for n, v in zip(shape, s))
        views.append(as_strided(a, (span,), (isz,), writeable=a is out))
    inner = iter(s[-1] for s in el)  # of the operands that are not one element
    code = ""
    for c in kinds:
        step = None if c == "s" else next(inner)
        code += c if c in "sy" else "c" if step == 1 else "r"
    source = _cpu_rows_source(program, code, len(shape))
    mod = load(source, "cpu")
    it = iter(views)
    args = [a if c == "s" else next(it) for c, a in zip(kinds, arrays)]
    y = next(it)
    fn = mod.parallel if _heavy(source, out.size) else mod.serial
    st = np.array([s[:-1] for s in el], dtype=np.int64).reshape(len(el), len(shape) - 1)
    p, k = params(values, out.dtype), F.constants(out.dtype)
    sh = np.array(shape, dtype=np.int64)
    return _bound(fn, *args, y, p, k, sh, st)


def cuda_step(program, values, ins, out):
    """:func:`cpu_step` for CUDA device arrays (C-contiguous, as plan buffers are)."""
    from .cuda.launch import broadcast_strides, flat, padded, step

    n = out.size
    if all(x.size == 1 or x.shape == out.shape for x in ins):
        kinds = "".join("s" if x.size == 1 else "f" for x in ins)
        extra = ()
    else:
        kinds = "b" * len(ins)
        extra = (padded(out.shape),) + tuple(broadcast_strides(x.shape, out.shape) for x in ins)
    mod = load(_cuda_source(program, kinds), "cuda")
    args = [flat(x) for x in ins] + [flat(out), params(values, out.dtype),
                                      F.constants(out.dtype), *extra]
    return step(mod.kernel, n, *args)
