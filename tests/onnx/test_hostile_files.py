"""Broken and hostile ONNX files: each is refused with a ModelFormatError or an
UnsupportedOpError by ``singa_graph.onnx.load`` (and running the loaded model) and by the
``sonnx`` backend, before anything large is allocated (tracemalloc's peak stays small) and
without reading any file outside the model's folder."""
import os
import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from singa_graph import sonnx
from singa_graph import onnx as sonnx_io
from singa_graph.errors import ModelFormatError, UnsupportedOpError
from singa_graph.onnx import guards

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
X11 = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])
BIG = numpy_helper.from_array(np.array([10 ** 6, 10 ** 6], np.int64), "s")  # 10^12 elements


def _model(nodes, inputs=(X,), inits=(), opset=17, domains=()):
    g = helper.make_graph(nodes, "hostile", list(inputs), [Y], initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *domains])
    m.ir_version = 8
    return m


def _external(location, nbytes=16, offset=None):
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("length", str(nbytes)),
                 ("offset", None if offset is None else str(offset))):
        if v is not None:
            e = w.external_data.add()
            e.key, e.value = k, v
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[w])


def _short_raw():
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    w.raw_data = b"\0" * 12
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[w])


def _huge_dims():
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    del w.dims[:]
    w.dims.extend([10 ** 6, 10 ** 6])
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[w])


def _short_constant():
    v = numpy_helper.from_array(np.ones((1, 4), np.float32), "v")
    v.raw_data = b"\0" * 4
    return _model([helper.make_node("Constant", [], ["c"], value=v),
                   helper.make_node("Add", ["x", "c"], ["y"])])


def _relu(opset):
    return _model([helper.make_node("Relu", ["x"], ["y"])], opset=opset)


def _good_bytes():
    return _relu(17).SerializeToString()


CASES = {
    "cycle": lambda d: _model([helper.make_node("Add", ["x", "z"], ["y"]),
                               helper.make_node("Relu", ["y"], ["z"])]),
    "dangling input": lambda d: _model([helper.make_node("Relu", ["nothing"], ["y"])]),
    "unknown domain": lambda d: _model([helper.make_node("Evil", ["x"], ["y"],
                                                         domain="com.evil")],
                                       domains=[helper.make_opsetid("com.evil", 1)]),
    "external data ../": lambda d: _external("../secret.bin"),
    "external data absolute": lambda d: _external(os.path.join(os.path.dirname(d),
                                                               "secret.bin")),
    "external data symlink out": lambda d: _external("link.bin"),
    "external data too short": lambda d: _external("short.bin"),
    "external data offset past the end": lambda d: _external("inside.bin", offset=8),
    "raw_data shorter than dims": lambda d: _short_raw(),
    "dims of 10^12 elements": lambda d: _huge_dims(),
    "Constant with short raw_data": lambda d: _short_constant(),
    "0-byte file": lambda d: b"",
    "truncated protobuf": lambda d: _good_bytes()[:len(_good_bytes()) // 2],
    "opset 1": lambda d: _relu(1),
    "opset 99": lambda d: _relu(99),
    "ConstantOfShape 10^12": lambda d: _model(
        [helper.make_node("ConstantOfShape", ["s"], ["c"]),
         helper.make_node("Add", ["x", "c"], ["y"])], inits=[BIG]),
    "Expand of the input to 10^12": lambda d: _model(
        [helper.make_node("Expand", ["x", "s"], ["y"])], inputs=(X11,), inits=[BIG]),
    "Expand of a constant to 10^12": lambda d: _model(
        [helper.make_node("Expand", ["one", "s"], ["c"]),
         helper.make_node("Add", ["x", "c"], ["y"])],
        inits=[BIG, numpy_helper.from_array(np.ones(1, np.float32), "one")]),
    "Tile to 10^12": lambda d: _model(
        [helper.make_node("Tile", ["x", "r"], ["y"])], inputs=(X11,),
        inits=[numpy_helper.from_array(np.array([10 ** 6, 10 ** 6], np.int64), "r")]),
}


@pytest.fixture
def folder(tmp_path):
    """The model's folder, with a secret beside it, a link out and two data files."""
    d = tmp_path / "model"
    d.mkdir()
    (tmp_path / "secret.bin").write_bytes(np.full(4, 7, np.float32).tobytes())
    os.symlink(tmp_path / "secret.bin", d / "link.bin")
    (d / "short.bin").write_bytes(b"\0" * 8)
    (d / "inside.bin").write_bytes(np.ones(4, np.float32).tobytes())
    return d


def _write(folder, name, model):
    path = folder / f"{name.replace(' ', '_').replace('/', '_')}.onnx"
    path.write_bytes(model if isinstance(model, bytes) else model.SerializeToString())
    return str(path)


def _refused(call, x):
    tracemalloc.start()
    try:
        with pytest.raises((ModelFormatError, UnsupportedOpError)) as info:
            call(x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak} bytes allocated before the refusal"
    return info.value


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_file_is_refused(case, folder):
    path = _write(folder, case, CASES[case](str(folder)))
    x = np.ones((1, 1) if "input" in case or "Tile" in case else (1, 4), np.float32)
    err = _refused(lambda a: sonnx_io.load(path)(a), x)
    assert str(err)
    _refused(lambda a: sonnx.prepare(path).run([a]), x)
    if not isinstance(CASES[case](str(folder)), bytes) and "external" not in case:
        proto = onnx.load(path, load_external_data=False)
        _refused(lambda a: sonnx.prepare(proto).run([a]), x)  # a ModelProto, not a path


def test_messages_name_the_problem(folder):
    def msg(case):
        path = _write(folder, case, CASES[case](str(folder)))
        return str(_refused(lambda a: sonnx_io.load(path)(a), np.ones((1, 4), np.float32)))

    assert "outside the model's folder" in msg("external data ../")
    assert "outside the model's folder" in msg("external data symlink out")
    assert "relative path" in msg("external data absolute")
    assert "raw_data holds 12 bytes" in msg("raw_data shorter than dims")
    assert "opset 1 " in msg("opset 1") and "Relu-1" in msg("opset 1")
    assert "opset 99 " in msg("opset 99")
    assert "(1000000, 1000000)" in msg("ConstantOfShape 10^12")
    assert "com.evil.Evil" in msg("unknown domain")
    assert "'z'" in msg("cycle") or "topologically" in msg("cycle")


def test_external_data_inside_the_folder_is_read(folder):
    w = np.arange(4, dtype=np.float32).reshape(1, 4)
    (folder / "w.bin").write_bytes(b"\0" * 4 + w.tobytes())
    path = _write(folder, "good", _external("w.bin", offset=4))
    x = np.ones((1, 4), np.float32)
    np.testing.assert_array_equal(sonnx_io.load(path)(x).to_numpy(), x + w)
    np.testing.assert_array_equal(sonnx.prepare(path).run([x])[0], x + w)
    with pytest.raises(ModelFormatError, match="load the model from its path"):
        sonnx_io.load(open(path, "rb").read())


def test_old_opset_with_ops_unchanged_since_imports(folder):
    # Not-1 is still ONNX's Not: an opset-1 model of it means what it says (ONNX's own
    # node tests have such models); Relu-1 (consumed_inputs) was refused above
    x = helper.make_tensor_value_info("x", TensorProto.BOOL, [2])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, [2])
    g = helper.make_graph([helper.make_node("Not", ["x"], ["y"])], "not1", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 1)])
    m.ir_version = 8
    got = sonnx.prepare(_write(folder, "not1", m)).run([np.array([True, False])])[0]
    np.testing.assert_array_equal(got, [False, True])


def test_limit_is_the_guard_constant(folder):
    # the limit is one constant: a model just under it is not refused for its size
    assert guards.MAX_TENSOR_BYTES >= 1 << 30
    ok = _model([helper.make_node("ConstantOfShape", ["s"], ["c"]),
                 helper.make_node("Add", ["x", "c"], ["y"])],
                inits=[numpy_helper.from_array(np.array([3, 4], np.int64), "s")])
    x = np.ones((1, 4), np.float32)
    assert sonnx_io.load(_write(folder, "ok", ok))(x).shape == (3, 4)
