"""ONNX ops that wait for the op library.

Each needs a new Operation (with its shape inference and gradient) and kernels before its
import can be one entry in :mod:`.import_math`, :mod:`.import_nn` or :mod:`.import_shape`.
Ops that are exact compositions of today's ops (Celu, HardSwish, Mish, ThresholdedRelu,
Shrink, IsNaN, IsInf, LessOrEqual, Hardmax, ArgMin, ReduceMax/Min/Prod, Squeeze, Unsqueeze,
unit-step Slice, LayerNormalization ...) are imported already; when a dedicated op lands, its
entry switches to it.

Ops whose inputs are all constants (or shapes) are folded while importing whatever their
type, so e.g. ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` works without a Gather
kernel; the ops below are needed only when they compute on run-time tensors.
"""

WAITING_FOR_OP_LIBRARY = {
    # elementwise math
    "Mod": "mod (a remainder op; integer division is missing too)",
    # reductions without a composition
    "CumSum": "cumsum (a scan along an axis)", "TopK": "topk (a sort along an axis)",
    # shape ops on run-time data
    "Gather": "gather", "GatherElements": "gather_elements", "GatherND": "gather_nd",
    "ScatterElements": "scatter_elements", "ScatterND": "scatter_nd", "Tile": "tile",
    "Pad": "pad (reflect/edge/wrap; constant padding is composed today)",
    "Resize": "upsample (linear, cubic, downsampling; whole-factor nearest is composed)",
    "Upsample": "upsample (linear; whole-factor nearest is composed)",
    "DepthToSpace": "depth_to_space", "SpaceToDepth": "space_to_depth", "OneHot": "onehot",
    "Trilu": "trilu", "Range": "range (run-time bounds)",
    # layers
    "RNN": "rnn", "LSTM": "lstm", "GRU": "gru", "ConvTranspose": "conv_transpose",
    "InstanceNormalization": "instance norm", "LRN": "lrn",
    "GroupNormalization": "group norm", "LpNormalization": "lp norm",
    "NegativeLogLikelihoodLoss": "nll loss", "SoftmaxCrossEntropyLoss": "ce loss",
}
