"""A Numba function compiled without its own ``fastmath`` setting inherits the flags of the
first caller that compiles it, and that one version then serves every caller and the
on-disk cache. A helper shared by a fast-math kernel and an exact one would so compute
differently depending on which ran first in a process (the conv epilogue once did:
runtime/kernels/cpu/epilogue.py). This test walks every fast-math kernel of the CPU
backend and fails on a callee that leaves ``fastmath`` unset, unless it is listed below as
safe: data movement (its results do not depend on the flags) or a helper that only
fast-math kernels call. Helpers compiled with ``inline="always"`` are exempt: Numba inlines
their code into each caller, which compiles it with its own flags (no shared version); the
walk still goes through them to what they call."""
import importlib
import inspect
import pkgutil

from numba.core.registry import CPUDispatcher

import singa_graph.runtime.kernels.cpu as cpu

#: callees of fast-math kernels that may leave fastmath unset, and why
SAFE = {
    "conv_loops.im2col": "copies and zeros",
    "conv_loops._im2col_shifted": "copies and zeros",
    "conv_loops._im2col_pairs": "copies and zeros",
    "conv_loops._copy_every_other": "copies (bits)",
    "conv_loops._span": "integer bounds",
    "dots.block_of": "integer bounds",
    "depthwise_loops.pitch": "integer geometry",
    "depthwise_loops.phases": "integer geometry",
    "dots.products": "called only by fast-math kernels (pointwise.forward, dots._ROWS)",
    "dots.dot44": "called only through dots.products",
    "dots.dot4": "called only through dots.products",
    "dots.dot2": "called only through dots.products",
    "dots.dot1": "called only through dots.products",
}


def _dispatchers():
    for info in pkgutil.iter_modules(cpu.__path__):
        mod = importlib.import_module(f"{cpu.__name__}.{info.name}")
        for value in vars(mod).values():
            fns = value if isinstance(value, tuple) else (value,)
            for fn in fns:
                if isinstance(fn, CPUDispatcher) and fn.py_func.__module__ == mod.__name__:
                    yield fn


def _callees(fn):
    """The Numba functions that ``fn``'s code names, directly or as ``module.name``."""
    names, env = fn.py_func.__code__.co_names, fn.py_func.__globals__
    for name in names:
        value = env.get(name)
        if isinstance(value, CPUDispatcher):
            yield value
        elif inspect.ismodule(value):
            for attr in names:
                sub = getattr(value, attr, None)
                if isinstance(sub, CPUDispatcher):
                    yield sub


def _label(fn):
    return f"{fn.py_func.__module__.rsplit('.', 1)[-1]}.{fn.py_func.__name__}"


def test_fast_math_kernels_call_no_helper_that_would_inherit_their_flags():
    fast = [fn for fn in _dispatchers() if fn.targetoptions.get("fastmath")]
    assert fast, "no fast-math kernel found: the walk itself is broken"
    unsafe = set()
    for root in fast:
        todo, seen = [root], {id(root)}
        while todo:
            for callee in _callees(todo.pop()):
                if id(callee) in seen:
                    continue
                seen.add(id(callee))
                todo.append(callee)
                opts = callee.targetoptions
                if ("fastmath" not in opts and opts.get("inline") != "always"
                        and _label(callee) not in SAFE):
                    unsafe.add(f"{_label(root)} -> {_label(callee)}")
    assert not unsafe, ("helpers called by fast-math kernels leave fastmath unset (pin it, "
                        f"or list them in SAFE with the reason): {sorted(unsafe)}")
