"""singa_graph.data: digits, MNIST IDX files, mini-batches."""
import gzip
import importlib.util
import struct

import numpy as np
import pytest

from singa_graph import data

needs_sklearn = pytest.mark.skipif(importlib.util.find_spec("sklearn") is None,
                                   reason="scikit-learn is not installed")


@needs_sklearn
def test_load_digits_shapes_scaling_split():
    xtr, ytr, xte, yte = data.load_digits(split=0.25, seed=1)
    assert xtr.dtype == np.float32 and ytr.dtype == np.int32
    assert xtr.shape[1:] == (1, 8, 8) and len(xtr) + len(xte) == 1797
    assert len(xte) == round(1797 * 0.25) and len(ytr) == len(xtr)
    assert xtr.min() == 0.0 and xtr.max() == 1.0
    assert set(np.unique(ytr)) == set(range(10))
    again = data.load_digits(split=0.25, seed=1)
    np.testing.assert_array_equal(again[0], xtr)
    other = data.load_digits(split=0.25, seed=2)
    assert not np.array_equal(other[1], ytr)


@needs_sklearn
def test_load_digits_padding_and_upsampling():
    x8 = data.load_digits(seed=0)[0]
    x28 = data.load_digits(seed=0, pad_to=28)[0]
    assert x28.shape[1:] == (1, 28, 28) and x28.dtype == np.float32
    np.testing.assert_array_equal(x28[:, :, 10:18, 10:18], x8)  # centred
    assert x28.sum() == pytest.approx(x8.sum())
    x32 = data.load_digits(seed=0, pad_to=32, mode="nearest")[0]
    assert x32.shape[1:] == (1, 32, 32)
    np.testing.assert_array_equal(x32[:, :, ::4, ::4], x8)  # 4x nearest upsampling
    x28n = data.load_digits(seed=0, pad_to=28, mode="nearest")[0]  # 3x then pad 2
    np.testing.assert_array_equal(x28n[:, :, 2:26:3, 2:26:3], x8)
    with pytest.raises(ValueError):
        data.load_digits(pad_to=6)


def _idx(arr, magic_type=0x08):
    head = bytes([0, 0, magic_type, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.astype(np.uint8).tobytes()


def _write_mnist(folder, gz_train=False, gz_test=True, n=(5, 3)):
    rng = np.random.default_rng(0)
    out = {}
    for part, count, gz in (("train", n[0], gz_train), ("t10k", n[1], gz_test)):
        imgs = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, count, dtype=np.uint8)
        for kind, arr in (("images-idx3-ubyte", imgs), ("labels-idx1-ubyte", labels)):
            name = folder / f"{part}-{kind}"
            raw = _idx(arr)
            if gz:
                with gzip.open(str(name) + ".gz", "wb") as f:
                    f.write(raw)
            else:
                name.write_bytes(raw)
        out[part] = (imgs, labels)
    return out


def test_load_mnist_plain_and_gz(tmp_path):
    ref = _write_mnist(tmp_path)
    xtr, ytr, xte, yte = data.load_mnist(str(tmp_path))
    assert xtr.shape == (5, 1, 28, 28) and xte.shape == (3, 1, 28, 28)
    assert xtr.dtype == np.float32 and ytr.dtype == np.int32
    np.testing.assert_allclose(xtr[:, 0], ref["train"][0] / 255.0, rtol=1e-6)
    np.testing.assert_allclose(xte[:, 0], ref["t10k"][0] / 255.0, rtol=1e-6)  # from .gz
    np.testing.assert_array_equal(ytr, ref["train"][1])
    np.testing.assert_array_equal(yte, ref["t10k"][1])


def test_load_mnist_bad_magic(tmp_path):
    _write_mnist(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte"
    raw = bytearray(p.read_bytes())
    raw[0:4] = b"\x12\x34\x56\x78"
    p.write_bytes(bytes(raw))
    with pytest.raises(data.DataError, match="magic number 0x12345678"):
        data.load_mnist(str(tmp_path))


def test_load_mnist_wrong_kind_truncated_and_missing(tmp_path):
    _write_mnist(tmp_path)
    labels = tmp_path / "train-labels-idx1-ubyte"
    images = tmp_path / "train-images-idx3-ubyte"
    good = images.read_bytes()
    images.write_bytes(labels.read_bytes())  # a label file where images belong
    with pytest.raises(data.DataError, match="1 dimensions, expected 3"):
        data.load_mnist(str(tmp_path))
    images.write_bytes(good[:-10])
    with pytest.raises(data.DataError, match="header announces"):
        data.load_mnist(str(tmp_path))
    images.unlink()
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        data.load_mnist(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        data.load_mnist(str(tmp_path / "nowhere"))


def test_iterate_minibatches_drop_or_keep_last():
    x = np.arange(10)[:, None].astype(np.float32)
    y = np.arange(10)
    bs = list(data.iterate_minibatches(x, y, 4, shuffle=False))
    assert [len(b[0]) for b in bs] == [4, 4]  # last partial batch dropped
    bs = list(data.iterate_minibatches(x, y, 4, shuffle=False, drop_last=False))
    assert [len(b[0]) for b in bs] == [4, 4, 2]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in bs]), y)
    sh = list(data.iterate_minibatches(x, y, 5, shuffle=True, seed=3))
    seen = np.concatenate([b[1] for b in sh])
    assert sorted(seen) == list(range(10)) and not np.array_equal(seen, y)
    for xb, yb in sh:
        np.testing.assert_array_equal(xb[:, 0], yb)  # rows stay paired
    with pytest.raises(ValueError):
        next(data.iterate_minibatches(x, y[:3], 2))
