"""Shape and indexing ops: forward vs numpy, float64 finite-difference gradients, errors on
bad input, compiled plan == eager."""
import numpy as np
import pytest

import singa_graph as sg
from singa_graph import ops
from helpers import check_grad, eager, graph_matches_eager

rng = np.random.default_rng(6)


def _d2s(x, bs, mode):  # the ONNX reference formula
    b, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(b, bs, bs, c // bs ** 2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(b, c // bs ** 2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(b, c // bs ** 2, h * bs, w * bs)


# (name, function of x, numpy reference, input shape)
CASES = [
    ("squeeze", lambda x: ops.squeeze(x, [1]), lambda x: x.squeeze(1), (3, 1, 2)),
    ("squeeze_all", lambda x: ops.squeeze(x), np.squeeze, (1, 3, 1)),
    ("unsqueeze", lambda x: ops.unsqueeze(x, [0, -1]), lambda x: x[None, ..., None], (2, 3)),
    ("slice", lambda x: ops.slice(x, [1, 0], [3, 5], [0, 2], [1, 2]),
     lambda x: x[1:3, :, 0:5:2], (4, 2, 5)),
    ("slice_neg_step", lambda x: ops.slice(x, [-1], [-(2 ** 62)], [1], [-2]),
     lambda x: x[:, ::-2], (2, 5)),
    ("tile", lambda x: ops.tile(x, [2, 1, 3]), lambda x: np.tile(x, [2, 1, 3]), (2, 3)),
    ("expand", lambda x: ops.expand(x, [2, 1, 4]), lambda x: np.broadcast_to(x, (2, 3, 4)),
     (3, 1)),
    ("pad_constant", lambda x: ops.pad(x, "constant", [0, 1, 2, 1], 1.5),
     lambda x: np.pad(x, ((0, 2), (1, 1)), constant_values=1.5), (3, 4)),
    ("pad_reflect", lambda x: ops.pad(x, "reflect", [2, 1, 1, 3]),
     lambda x: np.pad(x, ((2, 1), (1, 3)), "reflect"), (4, 5)),
    ("pad_edge", lambda x: ops.pad(x, "edge", [1, 0, 2, 2]),
     lambda x: np.pad(x, ((1, 2), (0, 2)), "edge"), (3, 2)),
    ("upsample", lambda x: ops.upsample(x, "nearest", [1, 1, 2, 3]),
     lambda x: x.repeat(2, 2).repeat(3, 3), (1, 2, 2, 2)),
    ("depth_to_space", lambda x: ops.depth_to_space(x, 2),
     lambda x: _d2s(x, 2, "DCR"), (1, 8, 2, 3)),
    ("depth_to_space_crd", lambda x: ops.depth_to_space(x, 2, "CRD"),
     lambda x: _d2s(x, 2, "CRD"), (2, 4, 2, 2)),
    ("space_to_depth", lambda x: ops.space_to_depth(ops.depth_to_space(x, 2), 2),
     lambda x: x, (1, 8, 2, 3)),
    ("gather", lambda x: ops.gather(x, 1, [[0, -1], [2, 2]]),
     lambda x: np.take(x, [[0, -1], [2, 2]], 1), (2, 3, 2)),
]


@pytest.mark.parametrize("name,fn,ref,shape", CASES, ids=[c[0] for c in CASES])
def test_layout_op(name, fn, ref, shape):
    x = rng.standard_normal(shape)
    np.testing.assert_array_equal(eager(fn, x), ref(x))
    check_grad(fn, x)
    graph_matches_eager(fn, x)


def test_space_to_depth_matches_onnx_reference():
    from onnx.reference.ops.op_space_to_depth import SpaceToDepth

    x = rng.standard_normal((1, 2, 4, 6))
    want = SpaceToDepth.eval(x, blocksize=2)
    np.testing.assert_array_equal(eager(lambda t: ops.space_to_depth(t, 2), x), want)


@pytest.mark.parametrize("fn,shape,msg", [
    (lambda x: ops.squeeze(x, [0]), (2, 3), "squeeze"),
    (lambda x: ops.slice(x, [0], [1], [3]), (2, 3), "out of range"),
    (lambda x: ops.tile(x, [2]), (2, 3), "repeats"),
    (lambda x: ops.pad(x, "reflect", [3, 0, 0, 0]), (2, 3), "reflect"),
    (lambda x: ops.pad(x, "constant", [1, 1]), (2, 3), "pads"),
    (lambda x: ops.upsample(x, "nearest", [2, 2]), (1, 2, 3), "scales"),
    (lambda x: ops.depth_to_space(x, 2), (1, 6, 2, 2), "divisible"),
    (lambda x: ops.space_to_depth(x, 2), (1, 4, 3, 2), "divisible"),
    (lambda x: ops.gather(x, 0, [2]), (2, 3), "out of range"),
    (lambda x: ops.expand(x, [4]), (2, 3), "broadcast"),
    (lambda x: ops.unsqueeze(x, [5]), (2, 3), "out of range"),
    (lambda x: ops.unsqueeze(x, [0, 0]), (2, 3), "repeated"),
    (lambda x: ops.onehot(5, x, 3, [0.0, 1.0]), (2,), "out of range"),
])
def test_bad_input_raises_shape_error(fn, shape, msg):
    with pytest.raises(sg.ShapeError, match=msg):
        fn(sg.Placeholder(shape))


def test_shape_nonzero_onehot_constant_of_shape():
    x = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]])
    np.testing.assert_array_equal(eager(ops.shape_of, x), [2, 3])
    np.testing.assert_array_equal(eager(ops.nonzero, x), np.array(np.nonzero(x)))
    ind = np.array([[0, 2], [-1, 1]])
    got = eager(lambda t: ops.onehot(1, t, 3, [-1.0, 4.0]), ind)
    want = np.where(np.eye(3)[ind % 3].transpose(0, 2, 1) == 1, 4.0, -1.0)
    np.testing.assert_array_equal(got, want)
    c = eager(lambda t: ops.constant_of_shape(t, 2.5), np.array([2, 3]))
    assert c.dtype == np.float32 and c.shape == (2, 3) and (c == 2.5).all()
    with pytest.raises(sg.ShapeError, match="concrete"):
        ops.nonzero(sg.Placeholder((2, 3)))
    with pytest.raises(sg.ShapeError, match="concrete"):
        ops.constant_of_shape(sg.Placeholder((2,), dtype="int64"))


def test_scatter_and_gather_elements():
    x = rng.standard_normal((3, 4))
    idx = np.array([[1, 0, 2, 2], [2, 1, 0, 0]])  # no repeats within a column
    upd = rng.standard_normal((2, 4))
    want = x.copy()
    np.put_along_axis(want, idx, upd, 0)
    np.testing.assert_array_equal(eager(lambda a, i, u: ops.scatter_elements(a, i, u, 0),
                                        x, idx, upd), want)
    np.testing.assert_array_equal(eager(ops.gather_elements, x, idx),
                                  np.take_along_axis(x, idx, 0))
    check_grad(lambda a, i, u: ops.scatter_elements(a, i, u, 0), x, idx, upd, wrt=[0, 2])
    with pytest.raises(sg.DTypeError, match="integer"):
        ops.scatter_elements(sg.Placeholder((3, 4)), sg.Placeholder((2, 4)),
                             sg.Placeholder((2, 4)))
    with pytest.raises(sg.ShapeError, match="do not fit"):
        ops.scatter_elements(sg.Placeholder((3, 4)), sg.Placeholder((2, 3), dtype="int64"),
                             sg.Placeholder((2, 4)))


def test_index_ops_in_a_compiled_plan():
    ind = np.array([[0, 2], [1, 1]])
    graph_matches_eager(lambda t: ops.onehot(-1, t, 3, [0.0, 1.0]), ind, grad=False)
    x = rng.standard_normal((3, 4))
    graph_matches_eager(lambda a: ops.shape_of(a), x, grad=False)
    idx = np.array([[1, 0, 2, 2], [2, 1, 0, 0]])
    upd = rng.standard_normal((2, 4))
    graph_matches_eager(lambda a, u: ops.scatter_elements(
        a, sg.Tensor(data=idx, requires_grad=False), u, 0), x, upd)
    graph_matches_eager(lambda a: ops.gather_elements(
        a, sg.Tensor(data=idx, requires_grad=False)), x, grad=False)
