"""ONNX ops that wait for the op library.

Each needs a new Operation (with its shape inference and gradient) and kernels before its
import can be one entry in :mod:`.import_math`, :mod:`.import_nn` or :mod:`.import_shape`.
Ops that are exact compositions of today's ops (Clip, Max, Min, Sum, Mean, PRelu, Elu, Selu,
Softplus, HardSigmoid, Squeeze, Unsqueeze, unit-step Slice, Gemm, LayerNormalization, the
Reduce* sums ...) are imported already; when a dedicated op lands, its entry switches to it.

Ops whose inputs are all constants (or shapes) are folded while importing whatever their
type, so e.g. ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` works without a Gather
kernel; the ops below are needed only when they compute on run-time tensors.
"""

WAITING_FOR_OP_LIBRARY = {
    # elementwise math
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
    "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh",
    "Atanh": "atanh", "Erf": "erf", "Floor": "floor", "Ceil": "ceil", "Round": "round",
    "Mod": "mod", "IsNaN": "isnan", "IsInf": "isinf",
    "Gelu": "gelu (erf form; the tanh approximation is composed today)",
    "ThresholdedRelu": "a comparison", "Shrink": "a comparison",
    # comparisons and logic
    "Equal": "equal", "Less": "less", "LessOrEqual": "less_equal", "Greater": "greater",
    "GreaterOrEqual": "greater_equal", "And": "and", "Or": "or", "Xor": "xor", "Not": "not",
    "Where": "where",
    # reductions without a sum form
    "ReduceMax": "max reduction", "ReduceMin": "min reduction", "ReduceProd": "product",
    "ArgMin": "argmin", "Hardmax": "argmax one-hot", "CumSum": "cumsum", "TopK": "topk",
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
