"""ONNX -> singa_graph: signal processing. DFT and STFT are real-linear maps of the
real-represented signal, so each imports as one fixed matrix applied along an axis
(:class:`singa_graph.ops.AxisMatmul`, built here with numpy's FFT of the unit vectors);
their gradients are the transposed maps. GridSample, AffineGrid and RoiAlign sample
images. The window functions, MelWeightMatrix and EyeLike depend on sizes only: their
values are computed while building, as Range's are.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from .. import ops
from .registry import importer


def _int(n, i, default=None):
    v = n.const(i) if n.has(i) else None
    return default if v is None else int(np.asarray(v).ravel()[0])


def _window(n, fn):
    size = _int(n, 0)
    dt = helper.tensor_dtype_to_np_dtype(n.attr("output_datatype", 1))
    big_n = size if n.attr("periodic", 1) else size - 1
    k = np.arange(size, dtype=np.float64)
    return fn(k, big_n).astype(dt)


@importer("HannWindow")
def hann_window(n):
    return _window(n, lambda k, m: np.sin(k * np.pi / m) ** 2)


@importer("HammingWindow")
def hamming_window(n):
    a = 25.0 / 46.0
    return _window(n, lambda k, m: a - np.cos(k * np.pi * 2 / m) * (1 - a))


@importer("BlackmanWindow")
def blackman_window(n):
    return _window(n, lambda k, m: 0.42 - 0.5 * np.cos(k * np.pi * 2 / m)
                   + 0.08 * np.cos(k * np.pi * 4 / m))


@importer("MelWeightMatrix")
def mel_weight_matrix(n):
    bins, dft, rate = _int(n, 0), _int(n, 1), _int(n, 2)
    lo, hi = (float(np.asarray(n.const(i)).ravel()[0]) for i in (3, 4))
    mel = lambda f: 2595 * np.log1p(f / 700) / np.log(10)  # noqa: E731
    edges = np.arange(bins + 2) * ((mel(hi) - mel(lo)) / (bins + 2)) + mel(lo)
    edges = 700 * np.expm1(edges / 2595 * np.log(10))
    edges = (((dft + 1) * edges) // rate).astype(int)
    out = np.zeros((dft // 2 + 1, bins))
    for i in range(bins):
        left, mid, right = edges[i:i + 3]
        if mid == left:
            out[mid, i] = 1
        else:
            out[left:mid + 1, i] = (np.arange(left, mid + 1) - left) / (mid - left)
        if right > mid:
            out[mid:right, i] = (right - np.arange(mid, right)) / (right - mid)
    return out.astype(helper.tensor_dtype_to_np_dtype(n.attr("output_datatype", 1)))


@importer("EyeLike")
def eye_like(n):
    x = n.t(0)
    shape = (x.shape[0], x.shape[0]) if x.ndim == 1 else x.shape
    code = n.attr("dtype", 0)
    dt = helper.tensor_dtype_to_np_dtype(code) if code else x.dtype
    return np.eye(*shape, k=n.attr("k", 0), dtype=dt)


def _dft_matrix(n_in, c_in, length, inverse, onesided):
    """The real matrix of ONNX's DFT of ``n_in`` samples with ``c_in`` (1 or 2) parts."""
    basis = np.eye(n_in * c_in).reshape(n_in * c_in, n_in, c_in)
    sig = basis[..., 0] + (1j * basis[..., 1] if c_in == 2 else 0)
    if inverse and onesided:
        out = np.fft.irfft(sig, n=length, axis=1)[..., None]
    elif inverse:
        f = np.fft.ifft(sig, n=length, axis=1)
        out = np.stack([f.real, f.imag], -1)
    else:
        f = np.fft.fft(sig, n=length, axis=1)
        if onesided:
            f = f[:, :length // 2 + 1]
        out = np.stack([f.real, f.imag], -1)
    return out.reshape(n_in * c_in, -1).T, out.shape[1], out.shape[2]


def _dft(n, axis):
    x = n.t(0)
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        n.fail("DFT along the last (real/imaginary) axis")
    inverse, onesided = bool(n.attr("inverse", 0)), bool(n.attr("onesided", 0))
    length = _int(n, 1)
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    c = x.shape[-1]
    w, m, c_out = _dft_matrix(x.shape[axis], c, length, inverse, onesided)
    perm = [i for i in range(x.ndim - 1) if i != axis] + [axis, x.ndim - 1]
    t = ops.transpose(x, perm) if perm != list(range(x.ndim)) else x
    lead = t.shape[:-2]
    y = ops.axis_matmul(ops.reshape(t, lead + (t.shape[-2] * c,)), [len(lead)],
                        [w.astype(np.float64)])
    y = ops.reshape(y, lead + (m, c_out))
    back = list(np.argsort(perm))
    return ops.transpose(y, back) if perm != list(range(x.ndim)) else y


@importer("DFT", since=17)
def dft_17(n):
    return _dft(n, n.attr("axis", 1))


@importer("DFT", since=20)
def dft_20(n):
    return _dft(n, _int(n, 2, -2))


@importer("STFT")
def stft(n):
    x = n.t(0)  # (batch, length, 1 or 2)
    step = _int(n, 1)
    window = np.asarray(n.const(2), np.float64) if n.has(2) else None
    frame = _int(n, 3, None if window is None else len(window))
    if frame is None:
        frame = x.shape[-2]
    if window is None:
        window = np.ones(frame)
    length, c = x.shape[1], x.shape[2]
    frames = 1 + (length - frame) // step
    onesided = bool(n.attr("onesided", 1))
    w, m, _ = _dft_matrix(frame, c, frame, False, onesided)  # (m*2, frame*c)
    big = np.zeros((frames, m * 2, length * c))
    for f in range(frames):
        cols = slice(f * step * c, (f * step + frame) * c)
        big[f, :, cols] = w * np.repeat(window, c)[None, :]
    y = ops.axis_matmul(ops.reshape(x, (x.shape[0], length * c)), [1],
                        [big.reshape(frames * m * 2, length * c)])
    return ops.reshape(y, (x.shape[0], frames, m, 2))


@importer("GridSample")
def grid_sample(n):
    return ops.grid_sample(n.t(0), n.t(1), n.attr("mode", "linear"),
                           n.attr("padding_mode", "zeros"), n.attr("align_corners", 0))


@importer("AffineGrid")
def affine_grid(n):
    """``theta @ [x, y, (z,) 1]`` over the normalised grid of the output size: a MatMul by
    a constant built from the size (known while building)."""
    theta = n.t(0)
    size = [int(v) for v in np.asarray(n.const(1)).ravel()]
    spatial = size[2:]
    align = bool(n.attr("align_corners", 0))
    axes = [np.linspace(-1, 1, s) if align else (2 * np.arange(s) + 1) / s - 1
            for s in spatial]
    mesh = np.meshgrid(*axes, indexing="ij")
    cols = [m.reshape(-1) for m in mesh[::-1]] + [np.ones(int(np.prod(spatial)))]
    base = np.stack(cols, 0).astype(theta.dtype)  # (k + 1, points)
    from .program import constant

    g = ops.matmul(theta, constant(base))  # (N, k, points)
    g = ops.transpose(g, (0, 2, 1))
    return ops.reshape(g, (size[0], *spatial, len(spatial)))


@importer("RoiAlign")
def roi_align(n):
    x = n.t(0)
    rois = n.t(1)
    if rois.dtype != x.dtype:
        rois = ops.cast(rois, x.dtype)
    half = n.attr("coordinate_transformation_mode", "half_pixel") == "half_pixel"
    op = ops.RoiAlign(n.attr("output_height", 1), n.attr("output_width", 1),
                      n.attr("sampling_ratio", 0), n.attr("spatial_scale", 1.0),
                      n.attr("mode", "avg"), half if n.opset >= 16 else False)
    return op(x, rois, n.t(2))
