"""Small data sets and mini-batching for the examples and tests.

* :func:`load_digits`: scikit-learn's 8x8 handwritten digits (1797 real images, shipped with
  scikit-learn, no download), optionally padded or upsampled to MNIST/CIFAR sizes.
* :func:`load_mnist`: MNIST from IDX files (optionally ``.gz``) in a folder you give.
* :func:`iterate_minibatches`: shuffled mini-batches with a fixed batch size.

Images are float32 NCHW scaled to [0, 1]; labels are int32 class indices.
"""
from __future__ import annotations

import gzip
import os
import struct
import zlib

import numpy as np

from .errors import SingaGraphError

__all__ = ["DataError", "load_digits", "load_mnist", "read_idx", "iterate_minibatches",
           "resize_images"]


class DataError(SingaGraphError, ValueError):
    """A data file is malformed (bad magic number, truncated, inconsistent counts)."""


def resize_images(x: np.ndarray, size: int, mode: str = "pad") -> np.ndarray:
    """Bring NCHW square images to ``size`` x ``size``.

    ``mode="pad"``: zero-pad around the image (centred). ``mode="nearest"``: repeat each pixel
    ``size // h`` times along both axes (nearest-neighbour upsampling), then zero-pad the rest.
    """
    h, w = x.shape[-2:]
    if size < max(h, w):
        raise ValueError(f"resize_images: cannot shrink {h}x{w} images to {size}x{size}")
    if mode == "nearest":
        f = size // max(h, w)
        x = x.repeat(f, axis=-2).repeat(f, axis=-1)
        h, w = x.shape[-2:]
    elif mode != "pad":
        raise ValueError(f"resize_images: mode must be 'pad' or 'nearest', got {mode!r}")
    top, left = (size - h) // 2, (size - w) // 2
    pad = [(0, 0)] * (x.ndim - 2) + [(top, size - h - top), (left, size - w - left)]
    return np.pad(x, pad)


def load_digits(split: float = 0.2, seed: int = 0, pad_to: int | None = None,
                mode: str = "pad"):
    """scikit-learn's digits as ``(x_train, y_train, x_test, y_test)``.

    Args:
        split: fraction of the 1797 images held out for testing (after a seeded shuffle).
        seed: seed of the shuffle.
        pad_to: optional image size (e.g. 28 or 32); see :func:`resize_images`.
        mode: ``"pad"`` (zero padding) or ``"nearest"`` (upsampling, then padding).

    Returns float32 images of shape (N, 1, 8, 8) (or ``pad_to``) in [0, 1] and int32 labels.
    """
    try:
        from sklearn.datasets import load_digits as _sk_digits
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("load_digits needs scikit-learn: pip install scikit-learn "
                          "(or the 'examples'/'test' extra of singa_graph)") from e
    if not 0.0 <= split < 1.0:
        raise ValueError(f"load_digits: split must lie in [0, 1), got {split}")
    d = _sk_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = d.target.astype(np.int32)
    if pad_to is not None:
        x = resize_images(x, int(pad_to), mode).astype(np.float32)
    idx = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * split))
    test, train = idx[:n_test], idx[n_test:]
    return (np.ascontiguousarray(x[train]), y[train], np.ascontiguousarray(x[test]), y[test])


_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
              0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: str, expect_ndim: int | None = None) -> np.ndarray:
    """Read one IDX file (``.gz`` is decompressed). Raises :class:`DataError` on a bad magic
    number, an unexpected number of dimensions or a truncated file."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        kind = "gzip-compressed IDX file" if path.endswith(".gz") else "IDX file"
        raise DataError(f"{path}: cannot read this {kind} ({type(e).__name__}: {e}); the "
                        "file is corrupt or truncated") from e
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        magic = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
        raise DataError(f"{path}: not an IDX file (magic number "
                        f"{'missing' if magic is None else hex(magic)}; expected 0x0000TTNN "
                        f"with type TT in {sorted(hex(t) for t in _IDX_TYPES)})")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    if expect_ndim is not None and ndim != expect_ndim:
        raise DataError(f"{path}: magic number {int.from_bytes(raw[:4], 'big'):#010x} says "
                        f"{ndim} dimensions, expected {expect_ndim} "
                        f"(0x{0x0800 + expect_ndim:08x})")
    if len(raw) < 4 + 4 * ndim:
        raise DataError(f"{path}: truncated header")
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    count = int(np.prod(shape, dtype=np.int64))
    body = raw[4 + 4 * ndim:]
    if len(body) != count * dtype.itemsize:
        raise DataError(f"{path}: header announces shape {shape} ({count * dtype.itemsize} "
                        f"bytes) but the file holds {len(body)} data bytes")
    return np.frombuffer(body, dtype).reshape(shape)


def _find(folder: str, stem: str) -> str:
    names = [stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx")
             + ".gz"]
    for n in names:
        p = os.path.join(folder, n)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(f"MNIST file {stem} not found in {folder!r} (tried "
                            f"{', '.join(names)})")


def load_mnist(path: str):
    """MNIST from the four IDX files in folder ``path`` as ``(x_train, y_train, x_test,
    y_test)``: float32 (N, 1, 28, 28) images in [0, 1] and int32 labels.

    Expected names: ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, each optionally ``.gz``.
    Raises FileNotFoundError for a missing folder or file and :class:`DataError` for a
    malformed one. Nothing is downloaded.
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"load_mnist: {path!r} is not a folder")
    out = []
    for part in ("train", "t10k"):
        imgs = read_idx(_find(path, f"{part}-images-idx3-ubyte"), 3)
        labels = read_idx(_find(path, f"{part}-labels-idx1-ubyte"), 1)
        if len(imgs) != len(labels):
            raise DataError(f"{path}: {part} has {len(imgs)} images but {len(labels)} labels")
        out += [(imgs.astype(np.float32) / 255.0)[:, None], labels.astype(np.int32)]
    return tuple(out)


def iterate_minibatches(x, y, batch_size: int, shuffle: bool = True, seed: int = 0,
                        drop_last: bool = True):
    """Yield ``(x_batch, y_batch)`` numpy arrays.

    With ``drop_last=True`` (the default) the last partial batch is dropped, so every batch
    has exactly ``batch_size`` rows, which a compiled graph with fixed input shapes needs;
    with ``drop_last=False`` it is yielded as a smaller final batch. ``shuffle`` permutes the
    rows with ``np.random.default_rng(seed)``; pass a different seed per epoch.
    """
    n = len(x)
    if len(y) != n:
        raise ValueError(f"iterate_minibatches: {n} inputs but {len(y)} labels")
    if batch_size < 1:
        raise ValueError(f"iterate_minibatches: batch_size must be >= 1, got {batch_size}")
    idx = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    for s in range(0, stop, batch_size):
        b = idx[s:s + batch_size]
        yield x[b], y[b]
