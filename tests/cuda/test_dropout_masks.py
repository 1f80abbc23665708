"""The CUDA Dropout kernel draws its masks from a counter-based hash, not numpy's generator,
so its masks cannot equal the CPU's: these tests check what a mask must satisfy instead
(values, keep rate, independence between runs and between neighbours, reproducibility from
the seed) and that evaluation is the identity. Evaluation is also compared with the CPU in
cases_layout_update.py."""
import numpy as np
import pytest

from singa_graph.ops.dropout import Dropout
from singa_graph.runtime import registry

# the hash is modular uint64 arithmetic; the simulator computes it with numpy scalars, which
# warn when a product wraps around
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

N = 4096  # the simulator runs a Python thread per GPU thread: big enough for statistics


def _bind(gpu, op, x):
    """The bound CUDA step of ``op`` on ``x`` and its device outputs."""
    xs = gpu.put(x)
    n_out = 2 if op.training else 1
    outs = [gpu.empty(x.shape, x.dtype) for _ in range(n_out)]
    for o in outs:
        gpu.fill(o, np.nan)
    with gpu.activate():
        step = registry.bind(op, [xs], outs, "cuda")

    def run():
        with gpu.activate():
            step()
            gpu.synchronize()
        return [gpu.get(o) for o in outs]
    return run


def _sigmas(p, n):
    """The standard deviation of a keep rate over ``n`` independent draws."""
    return np.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("ratio,dtype", [(0.1, np.float32), (0.5, np.float32),
                                         (0.8, np.float32), (0.3, np.float64)])
def test_mask_values_and_keep_rate(gpu, ratio, dtype):
    x = np.random.default_rng(0).uniform(-2, 2, (16, N // 16)).astype(dtype)
    y, m = _bind(gpu, Dropout(ratio, seed=123), x)()
    scale = dtype(1.0 / (1.0 - ratio))
    kept = m != 0
    assert set(np.unique(m)) <= {dtype(0), scale}, "a mask holds 0 or 1 / (1 - ratio)"
    np.testing.assert_array_equal(y, x * m)
    assert y.dtype == m.dtype == dtype
    assert abs(kept.mean() - (1 - ratio)) < 5 * _sigmas(ratio, N)
    # inverted dropout keeps the expectation: E[mask] = 1
    assert abs(m.mean() - 1.0) < 5 * float(scale) * _sigmas(ratio, N)


def test_runs_draw_new_independent_masks(gpu):
    ratio = 0.4
    run = _bind(gpu, Dropout(ratio, seed=7), np.ones(N, np.float32))
    a, b, c = (run()[1] != 0 for _ in range(3))
    keep = 1 - ratio
    for u, v in ((a, b), (b, c), (a, c)):
        assert (u != v).any()
        # independent masks keep an element in both with probability keep**2
        assert abs((u & v).mean() - keep ** 2) < 5 * _sigmas(keep ** 2, N)
    # neighbouring elements are independent too
    assert abs((a[1:] & a[:-1]).mean() - keep ** 2) < 5 * _sigmas(keep ** 2, N)
    for blk in (a[:N // 2], a[N // 2:]):  # no drift along the tensor
        assert abs(blk.mean() - keep) < 5 * _sigmas(ratio, N // 2)


def test_seed_reproduces_masks(gpu):
    x = np.ones(N // 4, np.float32)
    first = [_bind(gpu, Dropout(0.5, seed=99), x) for _ in range(2)]
    m1 = [first[0]()[1] for _ in range(2)]
    m2 = [first[1]()[1] for _ in range(2)]
    np.testing.assert_array_equal(m1[0], m2[0])  # a fresh step replays the same stream
    np.testing.assert_array_equal(m1[1], m2[1])
    other = _bind(gpu, Dropout(0.5, seed=100), x)()[1]
    assert (other != m1[0]).any()
    huge = _bind(gpu, Dropout(0.5, seed=2 ** 64 + 99), x)()[1]  # any Python int seeds
    assert set(np.unique(huge)) <= {0.0, 2.0}


def _reference_keep(seed, run, n, ratio, bits):
    """The documented stream in numpy: element i of run ``run`` is kept when the top ``bits``
    bits of SplitMix64(key + (i + 1) * golden) reach ceil(ratio * 2**bits)."""
    from singa_graph.runtime.kernels.cuda.dropout import GOLDEN, _key

    def mix(z):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    with np.errstate(over="ignore"):
        h = mix(_key(seed, run) + (np.arange(n, dtype=np.uint64) + np.uint64(1)) * GOLDEN)
    return (h >> np.uint64(64 - bits)) >= np.uint64(np.ceil(ratio * 2.0 ** bits))


@pytest.mark.parametrize("dtype,bits", [(np.float32, 24), (np.float64, 53)])
def test_masks_follow_the_documented_stream(gpu, dtype, bits):
    run = _bind(gpu, Dropout(0.35, seed=2024), np.ones(300, dtype))
    for r in range(2):
        kept = run()[1] != 0
        ratio = float(dtype(0.35))
        np.testing.assert_array_equal(kept, _reference_keep(2024, r, 300, ratio, bits))


def test_ratio_zero_keeps_everything(gpu):
    x = np.random.default_rng(1).normal(size=256).astype(np.float32)
    y, m = _bind(gpu, Dropout(0.0, seed=1), x)()
    np.testing.assert_array_equal(m, np.ones_like(x))
    np.testing.assert_array_equal(y, x)


def test_evaluation_is_the_identity(gpu):
    x = np.random.default_rng(2).normal(size=(3, 5)).astype(np.float32)
    (y,) = _bind(gpu, Dropout(0.5, training=False), x)()
    np.testing.assert_array_equal(y, x)
    # placed in place (the op allows it): nothing runs, the input stays as it was
    xs = gpu.put(x)
    with gpu.activate():
        registry.bind(Dropout(0.5, training=False), [xs], [xs], "cuda")()
        gpu.synchronize()
    np.testing.assert_array_equal(gpu.get(xs), x)


def test_training_in_place(gpu):
    # y may overwrite x (Dropout.inplace): each thread reads its x before writing its y
    x = np.random.default_rng(3).normal(size=512).astype(np.float32)
    xs, m = gpu.put(x), gpu.empty(x.shape, x.dtype)
    with gpu.activate():
        registry.bind(Dropout(0.5, seed=5), [xs], [xs, m], "cuda")()
        gpu.synchronize()
    np.testing.assert_array_equal(gpu.get(xs), x * gpu.get(m))
