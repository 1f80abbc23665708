"""Control flow on the CUDA device: If, Loop and Scan run their body plans on the CPU only,
and a model that needs them on the GPU is refused when it is built, naming the node."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from singa_graph.errors import UnsupportedOpError
from singa_graph.onnx.backend import SingaBackend


def test_scan_on_the_gpu_is_refused_clearly(gpu):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1)],
        "g", [helper.make_tensor_value_info("s0", TensorProto.FLOAT, [2]),
              helper.make_tensor_value_info("xs", TensorProto.FLOAT, [3, 2])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, [3, 2])])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    s0, xs = np.zeros(2, np.float32), np.ones((3, 2), np.float32)
    with pytest.raises(UnsupportedOpError, match="Scan.*CPU only"):
        SingaBackend.prepare(proto, gpu).run([s0, xs])
    np.testing.assert_array_equal(SingaBackend.prepare(proto).run([s0, xs])[0], [3, 3])
