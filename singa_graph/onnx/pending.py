"""ONNX ops that wait for the op library.

Each needs a new Operation (with its shape inference and gradient) and kernels before its
import can be one entry in the ``import_*`` modules. Ops that are exact compositions of
today's ops (Celu, HardSwish, Mish, ThresholdedRelu, Shrink, IsNaN, IsInf, LessOrEqual,
Hardmax, ArgMin, ReduceMax/Min/Prod, Trilu, wrap padding, the normalisations, the losses,
RNN/GRU and the non-default LSTMs ...) are imported already; when a dedicated op lands, its
entry switches to it.

Ops whose inputs are all constants (or shapes) are folded while importing whatever their
type, so e.g. ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` works without a kernel;
the ops below are needed only when they compute on run-time tensors. The list is empty
now: control flow and sequences import through import_control.py and import_sequence.py,
Attention, CumSum and Einsum through import_attention.py and import_transformer.py. ONNX
ops in no table (strings, image decoding, random draws, the training domain's Gradient)
are refused by name with UnsupportedOpError.
"""

WAITING_FOR_OP_LIBRARY: dict[str, str] = {}
