"""Kernel cases: reductions (Sum, Mean, SumTo), row-wise softmax ops, losses, ArgMax and
BatchNorm (runtime/kernels/cuda/reduce.py, activation.py, loss.py, norm.py).

The simulator runs TPB = 32 threads per block and smaller sizing thresholds (see
cuda/reduce.py), so these tiny shapes reach every mapping: one thread per output, narrow
and full-block groups, and extents split over several blocks (two launches)."""
import numpy as np

from singa_graph.ops import activation as act
from singa_graph.ops import elementwise as ew
from singa_graph.ops import loss
from singa_graph.ops import norm
from singa_graph.ops import reduce as red

from harness import Case, rand

X = rand(3, 4, 5)
X64 = X.astype(np.float64)
LONG = rand(4, 50, seed=1)          # 200 elements: a scalar reduction is split
INTS = np.arange(-20, 40, dtype=np.int32).reshape(3, 4, 5)

CASES = [
    # Sum / Mean: every axis form, keepdims, negative axes, dtypes
    Case(red.Sum(), [X], name="Sum all"),
    Case(red.Sum(None, True), [X], name="Sum all keepdims"),
    Case(red.Sum(1), [X], name="Sum middle axis"),
    Case(red.Sum(-1), [X], name="Sum negative axis"),
    Case(red.Sum((0, 2), True), [X], name="Sum outer+inner keepdims"),
    Case(red.Sum((0, -2)), [X], name="Sum leading axes (kept inner)"),
    Case(red.Sum(0), [rand(6, 70, seed=2)], name="Sum columns (thread per output)"),
    Case(red.Sum(), [LONG], name="Sum all split"),
    Case(red.Sum(1), [rand(2, 300, seed=3)], name="Sum rows split"),
    Case(red.Sum((0, 2)), [rand(5, 2, 40, seed=4)], name="Sum per channel split"),
    Case(red.Sum(1), [X64], name="Sum float64"),
    Case(red.Sum(0), [INTS], 0, 0, name="Sum int32"),
    # integer sums beyond float64's 53 bits: exact only if accumulated as integers
    Case(red.Sum(), [INTS.astype(np.int64) * 10**15 + 1], 0, 0, name="Sum int64 exact"),
    Case(red.Sum(), [np.arange(300, dtype=np.int64) * 10**14 + 1], 0, 0,
         name="Sum int64 split"),
    Case(red.Sum(1), [np.zeros((3, 0), np.float32)], name="Sum over an empty axis"),
    Case(red.Mean(), [X], name="Mean all"),
    Case(red.Mean((1, 2), True), [X], name="Mean keepdims"),
    Case(red.Mean(-1), [X64], name="Mean float64 negative axis"),
    Case(red.Mean(), [LONG], name="Mean all split"),
    Case(red.Mean(0), [INTS], name="Mean int32"),
    Case(red.Mean(1), [np.zeros((3, 0), np.float32)], name="Mean over an empty axis"),
    # SumTo: the broadcast patterns that gradients undo
    Case(ew.SumTo((1, 4, 1, 1)), [rand(3, 4, 3, 3, seed=5)], name="SumTo conv bias"),
    Case(ew.SumTo((3, 1, 1)), [rand(8, 3, 5, 5, seed=6)], name="SumTo bias split"),
    Case(ew.SumTo((5,)), [X], name="SumTo trailing (leading dims dropped)"),
    Case(ew.SumTo((3, 1, 5)), [X], name="SumTo middle"),
    Case(ew.SumTo((1,)), [X], name="SumTo scalar"),
    Case(ew.SumTo((1, 1)), [LONG], name="SumTo scalar split"),
    Case(ew.SumTo((3, 4, 5)), [X], name="SumTo same shape (copy)"),
    Case(ew.SumTo((4, 5)), [X64], name="SumTo float64"),
]

# Row-wise ops: rows of 3 (one thread per row), 10 (narrow groups), 40 and 70 (a block per
# row), along the last and a middle axis, float32 and float64
LOGITS = rand(6, 10, seed=10, low=-4, high=4)
for _n in (3, 10, 40, 70):
    _x = rand(5, _n, seed=11 + _n, low=-5, high=5)
    _dy = rand(5, _n, seed=12 + _n)
    _sm = np.exp(_x - _x.max(1, keepdims=True))
    _sm /= _sm.sum(1, keepdims=True)
    CASES += [
        Case(act.Softmax(-1), [_x], name=f"Softmax rows of {_n}"),
        Case(act.LogSoftmax(1), [_x], name=f"LogSoftmax rows of {_n}"),
        Case(act.SoftmaxGrad(1), [_dy, _sm], name=f"SoftmaxGrad rows of {_n}"),
        Case(act.LogSoftmaxGrad(-1), [_dy, np.log(_sm)], name=f"LogSoftmaxGrad rows of {_n}"),
    ]
_x4 = rand(2, 6, 3, 2, seed=20, low=-3, high=3)
_p4 = np.exp(_x4) / np.exp(_x4).sum(1, keepdims=True)
_d4 = rand(2, 6, 3, 2, seed=21)
CASES += [
    Case(act.Softmax(1), [_x4], name="Softmax along axis 1 of NCHW"),
    Case(act.LogSoftmax(-3), [_x4], name="LogSoftmax along axis -3 of NCHW"),
    Case(act.SoftmaxGrad(1), [_d4, _p4], name="SoftmaxGrad along axis 1 of NCHW"),
    Case(act.LogSoftmaxGrad(1), [_d4, np.log(_p4)], name="LogSoftmaxGrad along axis 1"),
    Case(act.Softmax(0), [rand(40, 3, seed=22, low=-3, high=3)], name="Softmax along axis 0"),
    Case(act.Softmax(1), [LOGITS.astype(np.float64)], name="Softmax float64"),
    Case(act.LogSoftmax(1), [LOGITS.astype(np.float64)], name="LogSoftmax float64"),
    Case(act.SoftmaxGrad(1), [_dy.astype(np.float64), _sm.astype(np.float64)],
         name="SoftmaxGrad float64"),
    Case(act.LogSoftmaxGrad(1), [_dy.astype(np.float64), np.log(_sm).astype(np.float64)],
         name="LogSoftmaxGrad float64"),
    Case(act.Softmax(1), [np.array([[1e4, 0, -1e4], [3, 3, 3]], np.float32)],
         name="Softmax large logits"),
]


# Losses: labels (int32, int64) and one-hot / probability targets; a batch small enough for
# one block and one launch, and one whose blocks' partials take a second launch
def _onehot(lab, c):
    return np.eye(c, dtype=np.float32)[lab]


def _probs(n, c, seed):
    p = rand(n, c, seed=seed, low=0.0, high=1.0)
    return p / p.sum(1, keepdims=True)


LAB = np.array([3, 0, 9, 9, 1, 5], np.int32)
BIG = rand(40, 12, seed=30, low=-4, high=4)  # 480 logits: several blocks
BIG_LAB = (np.arange(40) * 7 % 12).astype(np.int64)
DY = np.array([0.7], np.float32)
CASES += [
    Case(loss.SoftmaxCrossEntropy(), [LOGITS, LAB], name="SCE int32 labels"),
    Case(loss.SoftmaxCrossEntropy(), [LOGITS, _onehot(LAB, 10)], name="SCE one-hot"),
    Case(loss.SoftmaxCrossEntropy(), [LOGITS, _probs(6, 10, 31)], name="SCE probabilities"),
    Case(loss.SoftmaxCrossEntropy(), [BIG, BIG_LAB], name="SCE int64 labels split"),
    Case(loss.SoftmaxCrossEntropy(), [BIG, _probs(40, 12, 32)], name="SCE probs split"),
    Case(loss.SoftmaxCrossEntropy(), [rand(3, 70, seed=33), np.array([0, 69, 5])],
         name="SCE long rows"),
    Case(loss.SoftmaxCrossEntropy(), [rand(5, 3, seed=34), np.array([2, 0, 1, 1, 0])],
         name="SCE rows of 3"),
    Case(loss.SoftmaxCrossEntropy(), [LOGITS.astype(np.float64), LAB],
         name="SCE float64"),
    Case(loss.SoftmaxCrossEntropyGrad(), [LOGITS, LAB, DY], name="SCEGrad labels"),
    Case(loss.SoftmaxCrossEntropyGrad(), [LOGITS, _onehot(LAB, 10), DY],
         name="SCEGrad one-hot"),
    Case(loss.SoftmaxCrossEntropyGrad(), [BIG, _probs(40, 12, 35), DY],
         name="SCEGrad probabilities"),
    Case(loss.SoftmaxCrossEntropyGrad(), [rand(3, 70, seed=36), np.array([0, 69, 5]), DY],
         name="SCEGrad long rows"),
    Case(loss.SoftmaxCrossEntropyGrad(),
         [LOGITS.astype(np.float64), LAB.astype(np.int64), DY.astype(np.float64)],
         name="SCEGrad float64"),
    Case(loss.CrossEntropy(), [_probs(6, 10, 37), _onehot(LAB, 10)], name="CE one-hot"),
    Case(loss.CrossEntropy(), [_probs(40, 12, 38), _probs(40, 12, 39)], name="CE split"),
    Case(loss.CrossEntropy(), [np.array([[0.0, 1.0], [0.5, 0.5]], np.float32),
                               np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)],
         name="CE zero probability of a zero target"),
    Case(loss.CrossEntropy(), [np.array([[0.0, 1.0]], np.float32),
                               np.array([[1.0, 0.0]], np.float32)],
         name="CE zero probability of the target (inf)"),
    Case(loss.CrossEntropy(), [_probs(6, 10, 40).astype(np.float64),
                               _onehot(LAB, 10).astype(np.float64)], name="CE float64"),
    Case(loss.CrossEntropyGrad(), [_probs(6, 10, 41), _onehot(LAB, 10), DY], name="CEGrad"),
    Case(loss.CrossEntropyGrad(), [np.array([[0.0, 1.0], [0.0, 0.5]], np.float32),
                                   np.array([[0.0, 1.0], [1.0, 0.0]], np.float32), DY],
         name="CEGrad zero probability (0 and -inf)"),
    Case(loss.CrossEntropyGrad(), [_probs(6, 10, 42).astype(np.float64),
                                   _probs(6, 10, 43).astype(np.float64), DY.astype(np.float64)],
         name="CEGrad float64"),
    Case(loss.MeanSquareError(), [X, rand(3, 4, 5, seed=44)], name="MSE"),
    Case(loss.MeanSquareError(), [LONG, rand(4, 50, seed=45)], name="MSE split"),
    Case(loss.MeanSquareError(), [X64, X64 * 0.5], name="MSE float64"),
    Case(loss.MeanSquareErrorGrad(), [X, rand(3, 4, 5, seed=46), DY], name="MSEGrad"),
    Case(loss.MeanSquareErrorGrad(), [X64, X64 * 0.5, DY.astype(np.float64)],
         name="MSEGrad float64"),
]

# ArgMax: every axis, keepdims, ties (the first wins), NaN (the first NaN wins), integers
TIES = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [5, 1, 5, 5]], np.float32)
NANS = np.array([[1, np.nan, 3, np.nan], [np.nan, 0, 9, 1], [0, 1, 2, np.inf]], np.float32)
CASES += [
    Case(loss.ArgMax(), [LOGITS], name="ArgMax last axis"),
    Case(loss.ArgMax(0, True), [X], name="ArgMax axis 0 keepdims"),
    Case(loss.ArgMax(-2), [X], name="ArgMax middle axis"),
    Case(loss.ArgMax(1), [rand(3, 70, seed=47)], name="ArgMax long rows"),
    Case(loss.ArgMax(1), [np.tile(TIES, (1, 3))], name="ArgMax ties in groups"),
    Case(loss.ArgMax(), [TIES], name="ArgMax ties"),
    Case(loss.ArgMax(), [NANS], name="ArgMax NaN"),
    Case(loss.ArgMax(1), [np.tile(NANS, (1, 5))], name="ArgMax NaN in groups"),
    Case(loss.ArgMax(), [INTS], name="ArgMax int32"),
    Case(loss.ArgMax(0), [np.array([[2**60 + 1, 5], [2**60 + 2, 5]], np.int64)],
         name="ArgMax int64 beyond float64"),
    Case(loss.ArgMax(1), [X64], name="ArgMax float64"),
]


# BatchNorm: training (batch statistics, running statistics updated in place and compared)
# and eval, each with and without the fused ReLU; NCHW and NC inputs; few channels with many
# elements (statistics split over blocks); a mean far from zero; float64
def _bn_inputs(shape, seed, dtype=np.float32, shift=0.0):
    c = shape[1]
    x = rand(*shape, seed=seed, low=-2, high=2, dtype=dtype) + dtype(shift)
    return [x, rand(c, seed=seed + 1, low=0.5, high=1.5, dtype=dtype),
            rand(c, seed=seed + 2, dtype=dtype), rand(c, seed=seed + 3, dtype=dtype),
            rand(c, seed=seed + 4, low=0.5, high=2.0, dtype=dtype)]


def _bn_grad_inputs(shape, seed, relu, dtype=np.float32):
    x, scale = _bn_inputs(shape, seed, dtype)[:2]
    axes = (0,) + tuple(range(2, len(shape)))
    mean = x.mean(axes).astype(dtype)
    inv = (1 / np.sqrt(x.var(axes) + 1e-5)).astype(dtype)
    ins = [rand(*shape, seed=seed + 5, dtype=dtype), x, scale, mean, inv]
    if relu:
        ins.append(np.maximum(rand(*shape, seed=seed + 6, dtype=dtype), 0))
    return ins


# (3, 1, 7, 7): one channel, so the apply pass also splits it into chunks
BN_SHAPES = [((2, 3, 4, 4), "NCHW"), ((6, 5), "NC"), ((4, 2, 6, 6), "split"),
             ((3, 1, 7, 7), "one channel")]
for _shape, _what in BN_SHAPES:
    for _relu in (False, True):
        _tag = f"{_what}{' relu' if _relu else ''}"
        CASES += [
            Case(norm.BatchNorm2d(0.9, 1e-5, True, _relu), _bn_inputs(_shape, 50),
                 rtol=1e-5, atol=1e-5, name=f"BatchNorm2d train {_tag}"),
            Case(norm.BatchNorm2d(0.9, 1e-5, False, _relu), _bn_inputs(_shape, 51),
                 name=f"BatchNorm2d eval {_tag}"),
            Case(norm.BatchNorm2dGrad(_relu), _bn_grad_inputs(_shape, 52, _relu),
                 rtol=1e-5, atol=1e-5, name=f"BatchNorm2dGrad {_tag}"),
        ]
CASES += [
    Case(norm.BatchNorm2d(0.1, 1e-3, True), _bn_inputs((3, 2, 3, 3), 53, shift=1000.0),
         rtol=1e-5, atol=1e-4, name="BatchNorm2d train mean far from zero, momentum 0.1"),
    Case(norm.BatchNorm2d(0.9, 1e-5, True, True), _bn_inputs((2, 3, 2, 2), 54, np.float64),
         rtol=1e-10, atol=1e-10, name="BatchNorm2d train float64 relu"),
    Case(norm.BatchNorm2d(0.9, 1e-5, False), _bn_inputs((2, 3, 2, 2), 55, np.float64),
         rtol=1e-10, atol=1e-10, name="BatchNorm2d eval float64"),
    Case(norm.BatchNorm2dGrad(True), _bn_grad_inputs((2, 3, 2, 2), 56, True, np.float64),
         rtol=1e-10, atol=1e-10, name="BatchNorm2dGrad float64 relu"),
    Case(norm.BatchNorm2d(0.9, 1e-5, True), _bn_inputs((1, 2, 1, 1), 57),
         name="BatchNorm2d train one element per channel"),
]
