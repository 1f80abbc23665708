"""Kernel cases: layout and indexing (runtime/kernels/cuda/layout.py, indexing.py), optimizer
updates (update.py), Dropout in evaluation (dropout.py; training masks are checked by their
statistics in test_dropout_masks.py) and the LSTM cell (recurrent.py)."""
import numpy as np

from singa_graph.ir.tensor import Tensor
from singa_graph.ops import indexing as ix, layout as lay, recurrent, update as up
from singa_graph.ops.dropout import Dropout

from harness import Case, rand

X = rand(3, 4, 5)
IMG = rand(2, 8, 2, 3, seed=1)


def _slice_grad(x, *args):
    """A SliceGrad case of Slice(*args) on ``x``: the gradient op needs its forward's index."""
    sl = lay.Slice(*args)
    (spec,) = sl.infer(Tensor(data=x, requires_grad=False))
    return Case(lay.SliceGrad(sl, x.shape), [rand(*spec.shape, seed=2)],
                name=f"SliceGrad {args}")


SLICES = [((1,), (3,), (0,)),
          ((0, 1), (10, -1), (1, 2), (2, 2)),
          ((-1, 3), (-10, 0), (0, 2), (-1, -2)),
          ((2, 4, -2), (0, -100, 100), (0, 1, 2), (-1, -3, 1)),
          ((2,), (2,), (1,))]  # an empty slice
CASES = [Case(lay.Shape(), [X]), Case(lay.Shape(), [rand(2, 1, 2, 1, 2, 1, 2, 1, 2)],
                                      name="Shape of 9 axes (copied, not a launch argument)")]
for _args in SLICES:
    CASES.append(Case(lay.Slice(*_args), [X], name=f"Slice {_args}"))
    CASES.append(_slice_grad(X, *_args))
CASES += [
    Case(lay.Slice((1,), (4,), (1,)), [np.arange(24, dtype=np.int64).reshape(4, 6)],
         name="Slice int64"),
    Case(lay.Squeeze((1,)), [rand(3, 1, 4)]),
    Case(lay.Unsqueeze((0, 3)), [rand(3, 4)]),
    Case(lay.Pad("constant", (1, 0, 2, 0, 3, 1), 0.5), [X], name="Pad constant"),
    Case(lay.Pad("constant", (0, 2, 1, 0)), [np.arange(6, dtype=np.int32).reshape(2, 3)],
         name="Pad constant int32"),
    Case(lay.Pad("reflect", (2, 1, 0, 1, 3, 4)), [X], name="Pad reflect"),
    Case(lay.Pad("reflect", (0, 0, 1, 2, 0, 0, 1, 2)), [IMG[:, :2]], name="Pad reflect NCHW"),
    Case(lay.Pad("edge", (2, 0, 1, 1, 0, 3)), [X], name="Pad edge"),
    Case(lay.Pad("edge", (0, 0, 0, 0)), [X[0]], name="Pad edge nothing"),
    Case(lay.Tile((2, 1, 3)), [X], name="Tile"),
    Case(lay.Tile((2, 3, 1, 2)), [X], name="Tile extra leading repeats"),
    Case(lay.Tile((0, 2, 1)), [X], name="Tile zero repeats"),
    Case(lay.Upsample((1, 1, 2, 3)), [IMG], name="Upsample"),
    Case(lay.Upsample((3, 2)), [X[0]], name="Upsample 2-d"),
]
for _mode in ("DCR", "CRD"):
    CASES.append(Case(lay.DepthToSpace(2, _mode), [IMG], name=f"DepthToSpace {_mode}"))
    CASES.append(Case(lay.SpaceToDepth(2, _mode), [rand(2, 2, 4, 6, seed=3)],
                      name=f"SpaceToDepth {_mode}"))

# ---------------------------------------------------------------------- indexing
BIG = np.array([3, 0, -1, 2, 2, 0, -4, 1, 3, 3, 0], np.int64)  # past the launch-argument size
CASES += [
    Case(ix.Gather(0, [2, 0, -1]), [X], name="Gather axis 0"),
    Case(ix.Gather(-2, [[1, -4], [3, 3]]), [X], name="Gather 2-d indices, negative axis"),
    Case(ix.Gather(2, 4), [X], name="Gather one index"),
    Case(ix.Gather(1, BIG), [X], name="Gather many indices (workspace)"),
    Case(ix.GatherGrad(1, [1, 3, 1, -1], (3, 4, 5)), [rand(3, 4, 5, seed=4)],
         name="GatherGrad repeats"),
    Case(ix.GatherGrad(0, [[2], [0]], (3, 4)), [rand(2, 1, 4, seed=4).astype(np.float64)],
         name="GatherGrad float64"),
    Case(ix.GatherGrad(1, BIG, (3, 4, 5)), [rand(3, 11, 5, seed=5)],
         name="GatherGrad many indices (sorted on the host)"),
    Case(ix.GatherGrad(2, [4], (2, 3, 5)), [rand(2, 3, 1, seed=5)], name="GatherGrad last"),
    Case(ix.Take(0), [X, np.array([2, -3, 1, 1], np.int64)], name="Take"),
    Case(ix.Take(1), [X, np.array([[0, -1, 2], [3, 3, -4]], np.int32)],
         name="Take int32 2-d indices axis 1"),
    Case(ix.Take(2), [X, np.array(4, np.int64)], name="Take one index"),
    Case(ix.TakeGrad(0, (6, 3)), [rand(2, 4, 3, seed=6), np.array([[1, 5, 1, -1],
                                                                   [0, 1, 1, 2]])],
         rtol=1e-5, atol=1e-6, name="TakeGrad repeats (atomic adds)"),
    Case(ix.TakeGrad(1, (2, 4, 3)), [rand(2, 5, 3, seed=7),
                                     np.array([3, -1, 0, 3, 2], np.int32)],
         rtol=1e-5, atol=1e-6, name="TakeGrad axis 1 int32"),
    Case(ix.GatherElements(0), [X, np.array(np.random.default_rng(0).integers(-3, 3, (2, 4, 5)))],
         name="GatherElements axis 0"),
    Case(ix.GatherElements(-1), [X, np.array(np.random.default_rng(1).integers(-5, 5, (3, 4, 7)),
                                             np.int32)], name="GatherElements last axis"),
    Case(ix.ScatterElements(0), [X, np.array([[[0, 1, 2, -1, 0]] * 4, [[2, 1, 0, 0, -3]] * 4]),
                                 rand(2, 4, 5, seed=8)], name="ScatterElements repeats"),
    Case(ix.ScatterElements(2), [X, np.array(np.random.default_rng(2).integers(-5, 5, (3, 4, 7))),
                                 rand(3, 4, 7, seed=9)], name="ScatterElements axis 2 repeats"),
    Case(ix.ScatterElements(1), [np.arange(6, dtype=np.int32).reshape(2, 3),
                                 np.array([[2], [0]]), np.array([[-7], [9]], np.int32)],
         name="ScatterElements int32"),
    Case(ix.NonZero(), [np.array([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]], np.float32)]),
    Case(ix.NonZero(), [np.zeros((2, 3), np.float32)], name="NonZero none"),
    Case(ix.ConstantOfShape(1.5), [np.array([2, 3], np.int64)]),
    Case(ix.OneHot(-1, 4, (0.0, 1.0)), [np.array([[0, 3, -1], [2, 5, -5]], np.int64)],
         name="OneHot last axis, indices wrapped"),
    Case(ix.OneHot(0, 3, (-1.0, 2.0)), [np.array([0.0, 2.7, -1.2, 1.0], np.float32)],
         name="OneHot axis 0 float indices"),
    Case(ix.OneHot(1, 2), [np.array([[1, 0], [0, 1]], np.int32)], name="OneHot middle axis"),
]


# ---------------------------------------------------------------------- updates
def _h(*values):
    return [np.array(v, np.float64) for v in values]


P, G = rand(3, 7, seed=10), rand(3, 7, seed=11)
BUF = rand(3, 7, seed=12, low=-0.1, high=0.1)
UPDATES = [
    (up.SGDUpdate(False), [P, G] + _h(0.1, 0.0, 0.0, 0.0), "SGD plain"),
    (up.SGDUpdate(False), [P, G] + _h(0.1, 0.0, 0.0, 0.01), "SGD weight decay"),
    (up.SGDUpdate(True), [P, G, BUF] + _h(0.05, 0.9, 0.0, 0.0), "SGD momentum"),
    (up.SGDUpdate(True), [P, G, BUF] + _h(0.05, 0.9, 0.3, 0.01), "SGD dampening decay"),
    (up.SGDUpdate(True, True), [P, G, BUF] + _h(0.05, 0.9, 0.0, 0.01), "SGD nesterov"),
    (up.SGDUpdate(True), [P.astype(np.float64), G.astype(np.float64),
                          BUF.astype(np.float64)] + _h(0.05, 0.9, 0.1, 0.0), "SGD float64"),
    (up.AdamUpdate(), [P, G, np.zeros_like(P), np.zeros_like(P)] +
     _h(0.0, 0.001, 0.9, 0.999, 1e-8, 0.0), "Adam"),
    (up.AdamUpdate(), [P, G, BUF, np.abs(BUF)] + _h(5.0, 0.01, 0.8, 0.99, 1e-6, 0.01),
     "Adam resumed with decay"),
    (up.RMSPropUpdate(), [P, G, np.abs(BUF)] + _h(0.01, 0.9, 1e-8, 0.0), "RMSProp"),
    (up.RMSPropUpdate(), [P, G, np.zeros_like(P)] + _h(0.01, 0.5, 1e-6, 0.1),
     "RMSProp decay"),
    (up.AdaGradUpdate(), [P, G, np.zeros_like(P)] + _h(0.1, 1e-10, 0.0), "AdaGrad"),
    (up.AdaGradUpdate(), [P, G, np.abs(BUF)] + _h(0.1, 1e-6, 0.05), "AdaGrad decay"),
]
for _op, _ins, _name in UPDATES:
    for _steps in (1, 2):  # the parameter and every state input after one and two steps
        CASES.append(Case(_op, _ins, compare=[], steps=_steps, name=f"{_name} x{_steps}"))

# ---------------------------------------------------------------------- dropout, LSTM
CASES += [
    Case(Dropout(0.3, training=False), [X], name="Dropout evaluation"),
    Case(recurrent.LSTMCell(), [rand(3, 16, seed=13, low=-3, high=3), rand(3, 4, seed=14)]),
    Case(recurrent.LSTMCell(), [rand(2, 8, seed=13, low=-3, high=3).astype(np.float64),
                                rand(2, 2, seed=14).astype(np.float64)], rtol=1e-12,
         atol=1e-12, name="LSTMCell float64"),
    Case(recurrent.LSTMCellGrad(), [rand(3, 16, seed=15, low=-3, high=3), rand(3, 4, seed=16),
                                    rand(3, 4, seed=17), rand(3, 4, seed=18),
                                    rand(3, 4, seed=19)]),
    Case(recurrent.LSTMCellGrad(), [a.astype(np.float64) for a in (
        rand(2, 8, seed=15, low=-3, high=3), rand(2, 2, seed=16), rand(2, 2, seed=17),
        rand(2, 2, seed=18), rand(2, 2, seed=19))], rtol=1e-12, atol=1e-12,
         name="LSTMCellGrad float64"),
    # saturated gates: the sigmoid takes exp of non-positive numbers only
    Case(recurrent.LSTMCell(), [rand(2, 8, seed=20, low=-90, high=90), rand(2, 2, seed=21)],
         name="LSTMCell saturated"),
    Case(recurrent.LSTMCellGrad(), [rand(2, 8, seed=22, low=-90, high=90), rand(2, 2, seed=23),
                                    rand(2, 2, seed=24), rand(2, 2, seed=25),
                                    rand(2, 2, seed=26)], name="LSTMCellGrad saturated"),
]
