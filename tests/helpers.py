"""Shared checks for op tests: eager forward values and float64 finite-difference gradients."""
from __future__ import annotations

import numpy as np

from singa_graph.ir import no_grad
from singa_graph.ir.tensor import Parameter, Placeholder, Tensor
from singa_graph.passes.autodiff import backward


def eager(fn, *arrays, grad_mask=None):
    """Call ``fn`` on tensors made from ``arrays``; return the output(s) as numpy arrays."""
    ts = [Tensor(data=a, requires_grad=False) for a in arrays]
    with no_grad():
        out = fn(*ts)
    return tuple(o.data for o in out) if isinstance(out, tuple) else out.data


def check_grad(fn, *arrays, wrt=None, eps=1e-6, rtol=1e-4, atol=1e-6, seed=0, output=0):
    """Compare autodiff gradients of ``sum(fn(*xs) * w)`` with central differences in float64.

    ``wrt`` lists the argument indices to check (default: every floating array). The random
    weights ``w`` make every output element matter with a different factor.
    """
    arrays = [np.asarray(a) for a in arrays]
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if wrt is None else wrt
    for i in wrt:
        assert arrays[i].dtype == np.float64, "gradient checks run in float64"
    rng = np.random.default_rng(seed)

    def pick(out):
        return out[output] if isinstance(out, tuple) else out

    ref = pick(eager(fn, *arrays))
    w = rng.standard_normal(ref.shape)

    def f(xs):
        return float(np.sum(pick(eager(fn, *xs)) * w))

    ts = [Parameter(data=a.copy()) if i in wrt else Tensor(data=a, requires_grad=False)
          for i, a in enumerate(arrays)]
    y = pick(fn(*ts))
    from singa_graph.ops import mul, sum as _sum

    loss = _sum(mul(y, Tensor(data=w, requires_grad=False)))
    got = {id(p): g.data for p, g in backward(loss)}
    for i in wrt:
        x = arrays[i]
        num = np.zeros_like(x)
        it = np.nditer(x, flags=["multi_index"])
        for _ in it:
            idx = it.multi_index
            xp = [a.copy() for a in arrays]
            xm = [a.copy() for a in arrays]
            xp[i][idx] += eps
            xm[i][idx] -= eps
            num[idx] = (f(xp) - f(xm)) / (2 * eps)
        ana = got.get(id(ts[i]))
        assert ana is not None, f"no gradient for argument {i}"
        np.testing.assert_allclose(ana, num, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of argument {i}")


def graph_matches_eager(fn, *arrays, grad=True):
    """Run ``fn`` as a compiled, poisoned plan (forward and, with ``grad``, the gradients of
    ``sum(fn(*xs) * w)`` w.r.t. every floating argument) and compare with eager mode, bit for
    bit (both run the same kernels)."""
    from singa_graph.ir import Graph, building
    from singa_graph.ops import sum as _sum
    from singa_graph.passes import compile
    from singa_graph.passes.autodiff import autodiff

    arrays = [np.asarray(a) for a in arrays]
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if grad else []
    ref = eager(fn, *arrays)
    ref = ref[0] if isinstance(ref, tuple) else ref
    w = Tensor(data=np.random.default_rng(1).standard_normal(ref.shape).astype(ref.dtype),
               requires_grad=False)

    def run(make):
        ts = [make(i, a) for i, a in enumerate(arrays)]
        y = fn(*ts)
        return ts, (y[0] if isinstance(y, tuple) else y)

    params = {}
    with building():
        phs, y = run(lambda i, a: params.setdefault(i, Parameter(data=a.copy())) if i in wrt
                     else Placeholder(a.shape, a.dtype))
        g = Graph([y])
        grads = autodiff(g, _sum(y * w)) if wrt else {}
        # two parameters may share one gradient tensor (x + y): fetch each distinct one once
        distinct = list({id(grads[params[i]]): grads[params[i]] for i in wrt}.values())
        g.add_outputs(*distinct)
    feeds = {t: a for i, (t, a) in enumerate(zip(phs, arrays)) if i not in wrt}
    got = compile(g, poison=True).run(feeds)
    got = got if isinstance(got, (list, tuple)) else [got]
    if wrt:
        pos = {id(t): 1 + k for k, t in enumerate(distinct)}
        got = [got[0]] + [got[pos[id(grads[params[i]])]] for i in wrt]
    np.testing.assert_array_equal(got[0], ref)
    if wrt:
        ts, ye = run(lambda i, a: Parameter(data=a.copy()) if i in wrt
                     else Tensor(data=a, requires_grad=False))
        eg = {id(p): gr.data for p, gr in backward(_sum(ye * w))}
        for k, i in enumerate(wrt):
            np.testing.assert_array_equal(got[1 + k], eg[id(ts[i])])


def onnx_exports():
    """bench/torchvision_models.py for its ``randomise`` and ``export`` (torch.onnx, opset 17,
    symbolic batch) of any torch model; skips the calling module where torch is missing."""
    import importlib.util
    import os

    import pytest

    pytest.importorskip("torch")
    path = os.path.join(os.path.dirname(__file__), "..", "bench", "torchvision_models.py")
    if not os.path.exists(path):
        pytest.skip("bench/torchvision_models.py is not here", allow_module_level=True)
    spec = importlib.util.spec_from_file_location("torchvision_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torchvision_models():
    """bench/torchvision_models.py (torchvision's import shim, model builders, ONNX export),
    with torchvision imported; skips the calling test module where torch or torchvision is
    missing or the bench folder is not beside the tests."""
    import importlib.util
    import os

    import pytest

    path = os.path.join(os.path.dirname(__file__), "..", "bench", "torchvision_models.py")
    if not os.path.exists(path):
        pytest.skip("bench/torchvision_models.py is not here", allow_module_level=True)
    spec = importlib.util.spec_from_file_location("torchvision_models", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        mod.import_torchvision()
    except ImportError as e:
        pytest.skip(f"torchvision is not importable ({e}); make torch installs it",
                    allow_module_level=True)
    return mod


def hf_transformers():
    """Hugging Face ``transformers``; skips the calling test module where torch or it is
    missing. A torchvision beside it is imported first through bench/torchvision_models.py's
    shim (transformers imports torchvision, whose compiled ops do not load against the CPU
    torch)."""
    import importlib.util
    import os

    import pytest

    pytest.importorskip("torch")
    path = os.path.join(os.path.dirname(__file__), "..", "bench", "torchvision_models.py")
    if importlib.util.find_spec("torchvision") is not None and os.path.exists(path):
        spec = importlib.util.spec_from_file_location("torchvision_models", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        try:
            mod.import_torchvision()
        except ImportError:
            pass
    return pytest.importorskip("transformers", reason="transformers is not installed "
                               "(make torch installs it)")


def onnx_model(nodes, inputs, outputs, inits=(), opset=17):
    """A checked ONNX model (IR version at most 8, which onnxruntime reads) of ``nodes`` with
    initialisers ``inits`` (name -> array)."""
    import onnx
    from onnx import helper, numpy_helper

    g = helper.make_graph(nodes, "g", inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 8)
    onnx.checker.check_model(m, full_check=True)
    return m


def conv_reference(x, w, b, stride, pads, dil, res, act, groups=1):
    """The conv in float64, written plainly: a sum over taps of shifted inputs."""
    if groups > 1:
        og, cg = w.shape[0] // groups, x.shape[1] // groups
        y = np.concatenate([conv_reference(x[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og],
                                       None, stride, pads, dil, None, "")
                            for g in range(groups)], axis=1)
        return conv_reference(x[:, :0], w[:, :0], b, stride, pads, dil, y if res is None
                          else y + res, act)
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    ho = (h + pt + pb - dil * (kh - 1) - 1) // stride + 1
    wo = (wd + pl + pr - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n, o, ho, wo))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i * dil:i * dil + stride * (ho - 1) + 1:stride,
                       j * dil:j * dil + stride * (wo - 1) + 1:stride]
            y += np.einsum("oc,nchw->nohw", w[:, :, i, j].astype(np.float64), patch)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    if res is not None:
        y += res
    if act == "relu":
        y = np.maximum(y, 0)
    return y


def run_step(op, ins, nthreads=None):
    """The output of the CPU step of ``op`` on the arrays ``ins`` (filled with NaN first,
    its workspace carved from a fresh buffer), run once on ``nthreads`` threads."""
    from singa_graph.runtime import threads
    from singa_graph.runtime.registry import bind, workspace_bytes

    (spec,) = op.infer(*[Tensor.symbolic(a.shape, a.dtype) for a in ins])
    y = np.full(spec.shape, np.nan, spec.dtype)
    old = threads.get_num_threads()
    threads.set_num_threads(nthreads or old)
    try:
        ws = np.empty(workspace_bytes(op, ins, [y]), np.uint8)
        bind(op, ins, [y], ws=ws)()
    finally:
        threads.set_num_threads(old)
    return y


def blocked_weight(w, groups=1):
    """An OIHW conv weight in Conv2dDirect's blocks, ``(ceil(O/B), kh, kw, S, B)``, by
    numpy: spread over its groups' channels, filled up with zeros, permuted."""
    from singa_graph.ops.conv_tiles import Conv2dDirect
    from singa_graph.passes.held_weights import BLOCKED

    blk = Conv2dDirect.block(w.dtype)
    wide = Conv2dDirect.spread_groups(w, groups) if groups > 1 else w
    filled = np.concatenate([wide, np.zeros((-w.shape[0] % blk,) + wide.shape[1:], w.dtype)])
    wb = np.ascontiguousarray(np.transpose(filled.reshape(-1, blk, *wide.shape[1:]), BLOCKED))
    assert wb.shape == Conv2dDirect.blocked_shape(w.shape, w.dtype, groups)
    return wb
