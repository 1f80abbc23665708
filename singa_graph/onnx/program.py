"""An ONNX graph as a program that builds singa_graph ops.

:class:`Program` checks a ModelProto once (structure, supported ops) and then *traces* it:
it walks the nodes in order and calls each node's import function (see :mod:`.registry`) on
singa_graph Tensors, so a Placeholder input gives a Graph ready for the compiler and a
concrete input runs eagerly. Values that only depend on constants and on shapes (``Shape ->
Gather -> Unsqueeze -> Concat`` chains, ``Constant`` nodes, integer initialisers) are folded
to numpy arrays while tracing, with ONNX's reference implementation of each op (or the numpy
folds of :mod:`.folding` where that reference fails); a node that cannot be folded but has an
import is built into the graph and runs at run time. Shapes are static within one plan, so
each batch size traces and compiles its own plan.
"""
from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import (DTypeError, GraphError, ModelFormatError, ShapeError,
                      SingaGraphError, UnsupportedOpError)
from ..ir.tensor import Parameter, Tensor
from . import guards
from .registry import find_importer

# Ops whose output is known at trace time whatever their inputs are.
STATIC_OUTPUT = {"Shape", "Size"}
# Ops whose output shapes depend on input values: with known inputs they run their own
# kernels while tracing (eagerly) rather than being folded by the reference ops.
BY_VALUE = {"NonZero", "Unique", "NonMaxSuppression"}
# Ops never folded even with constant inputs: they draw random numbers, read outer names
# or build sequences and optionals.
RANDOM = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike",
          "Bernoulli", "Multinomial", "Dropout",
          "If", "Loop", "Scan", "SequenceMap",  # control flow reads outer names
          # sequences and optionals are lists and None while tracing (import_sequence.py)
          "SequenceEmpty", "SequenceConstruct", "SequenceLength", "SequenceAt",
          "SequenceInsert", "SequenceErase", "ConcatFromSequence", "SplitToSequence",
          "Optional", "OptionalHasElement", "OptionalGetElement"}


class NeedsValue(GraphError):
    """An import function needs the value of a tensor that is only known at run time."""

    def __init__(self, name, node):
        super().__init__(f"node {node!r} needs the value of {name!r} while building the "
                         "graph (a shape, axes or sizes input), but it is computed at run time")
        self.value_name = name


class _NotFolded(Exception):
    """A node whose inputs are known could not be folded; its import runs it instead."""


def read_model(src) -> onnx.ModelProto:
    """A ModelProto from a path, bytes or a ModelProto; clear errors for bad files.

    Everything in the file is checked before it is used (see :mod:`.guards`): the opset,
    the size of every stored tensor against its dims, and external data, which is read
    only from files inside the model's folder and only for a model given by its path."""
    base_dir = None
    if isinstance(src, onnx.ModelProto):
        model = src
    else:
        if isinstance(src, (bytes, bytearray)):
            data, what = bytes(src), "the given bytes"
        else:
            what = repr(str(src))
            try:
                with open(src, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise ModelFormatError(f"cannot read ONNX file {what}: {e.strerror}") from None
            base_dir = os.path.dirname(os.path.abspath(str(src)))
        if not data:
            raise ModelFormatError(f"{what} is empty, not an ONNX model")
        model = onnx.ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:  # protobuf's DecodeError and friends
            raise ModelFormatError(f"{what} is not an ONNX model: the protobuf data is "
                                   f"truncated or malformed ({len(data)} bytes)") from None
        if not model.HasField("graph") or not model.opset_import:
            raise ModelFormatError(f"{what} is not an ONNX model: it has no graph or no "
                                   "opset_import")
    guards.check_opset(model)
    guards.check_stored_tensors(model)
    guards.load_external_data(model, base_dir)  # checked, then read into the model
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFormatError(f"invalid ONNX model: {first}") from None
    return model


def default_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return onnx.defs.onnx_opset_version()  # only other domains: their ops are reported


def _copy_except(msg, skip: str):
    """A new message of ``msg``'s type with every field set in ``msg`` but ``skip``."""
    out = type(msg)()
    for field, value in msg.ListFields():
        if field.name == skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else \
            field.label == field.LABEL_REPEATED  # protobuf before 5.x
        if repeated:
            getattr(out, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(out, field.name).CopyFrom(value)
        else:
            setattr(out, field.name, value)
    return out


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its graph's initialisers cut to their names, types and dims (the
    data lives on as the Program's numpy arrays). Built anew rather than cleared in
    place: protobuf keeps a message's memory until the whole message is freed."""
    graph = _copy_except(model.graph, "initializer")
    graph.initializer.extend(onnx.TensorProto(name=t.name, data_type=t.data_type,
                                              dims=t.dims) for t in model.graph.initializer)
    light = _copy_except(model, "graph")
    light.graph.CopyFrom(graph)
    return light


class Program:
    """A checked ONNX graph that can be traced into singa_graph ops any number of times.

    Attributes:
        model: the ModelProto.
        opset: its version of the default domain.
        inputs: names of the graph inputs that are fed (initialisers excluded).
        outputs: names of the graph outputs.
        initializers: ``{name: numpy array}``.
    """

    def __init__(self, model: onnx.ModelProto, release_data: bool = False):
        """``release_data``: the ModelProto is this Program's own (parsed from a file or
        bytes), so the payloads of its graph's initialisers are dropped once they are
        numpy arrays; otherwise a model kept the file's weights twice (convnext_tiny:
        109 MB of protobuf beside its 109 MB of parameters)."""
        self.model = model
        self.graph = model.graph
        self.opset = default_opset(model)
        self.opsets = {imp.domain: int(imp.version) for imp in model.opset_import}
        try:
            self.initializers = {t.name: numpy_helper.to_array(t) for t in self.graph.initializer}
        except Exception as e:
            raise ModelFormatError(f"cannot read an initialiser of the model: {e}") from None
        if release_data:
            self.model = model = _without_weights(model)
            self.graph = model.graph
        self.inputs = [i.name for i in self.graph.input if i.name not in self.initializers]
        self.input_info = {i.name: i for i in self.graph.input}
        self.outputs = [o.name for o in self.graph.output]
        self._check_order()
        self.check_supported()

    @classmethod
    def read(cls, src) -> "Program":
        """A Program of a path, bytes or ModelProto (:func:`read_model`); a proto it parsed
        itself is its own, so its weights' payloads are released."""
        proto = read_model(src)
        return cls(proto, release_data=proto is not src)

    def _check_order(self) -> None:
        """Every node reads only graph inputs, initialisers and outputs of earlier nodes (so
        the graph has no cycle and no dangling input), and every graph output is made."""
        known = {i.name for i in self.graph.input} | set(self.initializers)
        for n in self.graph.node:
            for x in n.input:
                if x and x not in known:
                    raise ModelFormatError(
                        f"node {n.name or n.op_type!r} ({n.op_type}) reads {x!r}, which no "
                        "graph input, initialiser or earlier node produces (a dangling input,"
                        " or a cycle)")
            known.update(o for o in n.output if o)
        missing = [o for o in self.outputs if o not in known]
        if missing:
            raise ModelFormatError(f"the graph never produces its output(s) {missing}")

    def input_shapes(self) -> list[tuple]:
        """Declared shapes of the fed inputs; symbolic or unknown dimensions are None."""
        out = []
        for name in self.inputs:
            t = self.input_info[name].type.tensor_type
            dims = t.shape.dim if t.HasField("shape") else None
            out.append(None if dims is None else
                       tuple(d.dim_value if d.HasField("dim_value") else None for d in dims))
        return out

    def check_inputs(self, shapes) -> None:
        """Raise ShapeError unless ``shapes`` fit the declared input shapes."""
        if len(shapes) != len(self.inputs):
            raise ShapeError(f"the model takes {len(self.inputs)} input(s) {self.inputs}, "
                             f"got {len(shapes)}")
        for name, shape, want in zip(self.inputs, shapes, self.input_shapes()):
            if want is not None and (len(shape) != len(want) or any(
                    w is not None and w != s for w, s in zip(want, shape))):
                pretty = tuple("?" if w is None else w for w in want)
                raise ShapeError(f"input {name!r} has shape {tuple(shape)}, the model "
                                 f"expects {pretty}")

    # ------------------------------------------------------------------ analysis
    def static_nodes(self, static_inputs=()) -> set[int]:
        """Indices of the nodes whose outputs are known while tracing."""
        known = set(static_inputs) | {k for k, v in self.initializers.items()
                                      if v.dtype.kind not in "fc"}
        return _static_nodes(self.graph.node, known)

    def check_supported(self, static_inputs=()) -> None:
        """Raise UnsupportedOpError naming every op type of the model we cannot import."""
        static = self.static_nodes(static_inputs)
        missing: Counter = Counter()

        def check(nodes, static):
            for i, n in enumerate(nodes):
                if i not in static and self.importer_of(n) is None:
                    missing[n.op_type if n.domain in ("", "ai.onnx")
                            else f"{n.domain}.{n.op_type}"] += 1
                for g in subgraphs(n):  # bodies: their constant parts fold too
                    check(g.node, _static_nodes(g.node, {t.name for t in g.initializer}))

        check(self.graph.node, static)
        if missing:
            listed = ", ".join(f"{k} (x{v})" if v > 1 else k for k, v in sorted(missing.items()))
            raise UnsupportedOpError(f"the model uses {len(missing)} op type(s) that "
                                     f"singa_graph cannot import yet: {listed}")

    def importer_of(self, proto):
        """The import function of a node (of any domain the model imports), or None."""
        if proto.domain in ("", "ai.onnx"):
            return find_importer(proto.op_type, self.opset)
        if proto.domain not in self.opsets:
            return None
        return find_importer(proto.op_type, self.opsets[proto.domain], proto.domain)

    # ------------------------------------------------------------------ tracing
    def trace(self, feeds: dict, store, training: bool = False, last_layers=None,
              extra_outputs=()) -> list:
        """Build the graph. ``feeds`` maps input names to Tensors (Placeholders or data) or
        numpy arrays (values known now); ``store`` creates and keeps Parameters and buffers.
        Returns the outputs (Tensors, or numpy arrays for values known while tracing)."""
        env = dict(feeds)
        static_in = [k for k, v in feeds.items() if isinstance(v, np.ndarray)]
        static = self.static_nodes(static_in)
        nodes = list(self.graph.node)
        if last_layers is not None:
            nodes = nodes[:last_layers]
            if not nodes:
                raise GraphError(f"last_layers={last_layers} leaves no node of the model")
        unfolded: dict[str, str] = {}  # values meant to be folded -> why they were not
        for i, proto in enumerate(nodes):
            node = NodeView(proto, env, self, store, training)
            guards.check_node_output(node)  # before anything of that size is made
            where = f"ONNX node {proto.name or proto.op_type!r} ({proto.op_type})"
            fn = self.importer_of(proto)
            values = None
            if i in static and proto.op_type not in STATIC_OUTPUT | BY_VALUE:
                why = next((unfolded[x] for x in proto.input if x in unfolded), None)
                if why is None:
                    try:
                        values = self._fold(proto, env, can_run=fn is not None)
                    except _NotFolded as e:
                        why = str(e)
                if values is None:
                    unfolded.update((o, why) for o in proto.output if o)
                    if fn is None:
                        raise UnsupportedOpError(
                            f"{proto.op_type} node {proto.name!r} has no import to run it at "
                            f"run time, and it could not be folded: {why}")
            if values is None:  # computed at run time (or folding left it to its import)
                try:
                    values = fn(node)
                except NeedsValue as e:
                    if e.value_name in unfolded:
                        raise UnsupportedOpError(
                            f"{where} needs the value of {e.value_name!r} while building, "
                            f"and it could not be folded: {unfolded[e.value_name]}") from None
                    raise
                except UnsupportedOpError:
                    raise
                except SingaGraphError as e:  # shape and dtype errors: name the ONNX node
                    raise type(e)(f"{where}: {e}") from e
                except (ValueError, TypeError, IndexError, KeyError) as e:
                    raise GraphError(f"{where}: {e}") from e
            if not isinstance(values, (list, tuple)):
                values = [values]
            for v in values:  # traced tensors are not allocated yet: refuse huge ones now
                if isinstance(v, Tensor):
                    guards.check_size(v.shape, v.dtype, where)
            for name, v in zip(proto.output, values):
                if name:
                    env[name] = v
            wanted = [o for o in proto.output[len(values):] if o]
            if wanted:
                raise UnsupportedOpError(f"{proto.op_type} node {proto.name!r}: output(s) "
                                         f"{wanted} are not supported")
        names = (list(nodes[-1].output) if last_layers is not None else self.outputs)
        names = [n for n in names if n] + list(extra_outputs)
        missing = [n for n in names if n not in env]
        if missing:
            raise GraphError(f"the model never computes output(s) {missing}")
        outs = [env[n] for n in names]
        device = getattr(store, "_device", None)
        if device is not None:
            _move_constants(outs, device, keep={id(v) for v in feeds.values()})
        return outs

    def _fold(self, proto, env, can_run: bool = False):
        """Run one node on known values: with :data:`.folding.FOLDERS` where ONNX's reference
        implementation is wrong or slow, else with that reference. When neither can and the
        node has an import (``can_run``), :class:`_NotFolded` saying why: the node is built
        into the graph and runs at run time instead."""
        from onnx import helper
        from onnx.reference import ReferenceEvaluator

        from .folding import FOLDERS

        ins = [x for x in proto.input if x]
        vals = {}
        for x in ins:
            v = env[x] if x in env else self.initializers[x]
            vals[x] = np.asarray(v)
        own = FOLDERS.get(proto.op_type)
        if own is not None:
            attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
            try:
                return [np.asarray(o) for o in own(
                    [vals[x] if x else None for x in proto.input], attrs)]
            except Exception as e:
                why = f"cannot evaluate constant node {proto.name!r} ({proto.op_type}): {e}"
                raise (_NotFolded if can_run else UnsupportedOpError)(why) from None
        graph = helper.make_graph(
            [proto], "fold",
            [helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(vals[x].dtype),
                                           vals[x].shape) for x in ins],
            [helper.make_empty_tensor_value_info(o) for o in proto.output if o])
        m = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        try:
            out = ReferenceEvaluator(m).run(None, vals)
        except Exception as e:
            why = f"cannot evaluate constant node {proto.name!r} ({proto.op_type}): {e}"
            raise (_NotFolded if can_run else UnsupportedOpError)(why) from None
        return [np.asarray(o) for o in out]


def _static_nodes(nodes, known) -> set[int]:
    """Indices of ``nodes`` whose outputs are known while tracing, given the names
    ``known`` now (grown in place)."""
    out = set()
    for i, n in enumerate(nodes):
        ins = [x for x in n.input if x]
        if n.op_type in STATIC_OUTPUT or (
                n.op_type not in RANDOM and (ins or n.op_type == "Constant")
                and all(x in known for x in ins)):
            out.add(i)
            known.update(o for o in n.output if o)
    return out


def subgraphs(proto):
    """The GraphProtos held in the attributes of node ``proto`` (If's branches, Loop's and
    Scan's bodies)."""
    for a in proto.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


class NodeView:
    """What an import function sees of one ONNX node: attributes with their defaults, its
    inputs as Tensors (:meth:`t`) or as values known now (:meth:`const`), and the mode."""

    def __init__(self, proto, env, program, store, training):
        self.proto = proto
        self.op_type = proto.op_type
        self.name = proto.name or f"{proto.op_type}({', '.join(proto.output)})"
        self.opset = program.opset
        self.training = bool(training)
        self._env, self._program, self._store = env, program, store
        self._attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}

    @property
    def n_inputs(self) -> int:
        return len(self.proto.input)

    @property
    def n_outputs(self) -> int:
        return len([o for o in self.proto.output if o])

    def attr(self, name, default=None):
        v = self._attrs.get(name, default)
        if isinstance(v, bytes):
            return v.decode()
        if isinstance(v, list):
            return [x.decode() if isinstance(x, bytes) else x for x in v]
        return v

    def has(self, i: int) -> bool:
        return i < len(self.proto.input) and bool(self.proto.input[i])

    def _raw(self, i):
        name = self.proto.input[i]
        if name in self._env:
            return self._env[name]
        if name in self._program.initializers:
            return self._program.initializers[name]
        raise GraphError(f"node {self.name!r} reads {name!r}, which nothing produces")

    def is_const(self, i) -> bool:
        """True when input ``i`` is known now (a constant, an initialiser, a shape)."""
        v = self._raw(i)
        return isinstance(v, np.ndarray) or (isinstance(v, Tensor) and v.data is not None
                                             and v.creator is None)

    def const(self, i: int, default=None):
        """Input ``i`` as a numpy array known while building (shapes, axes, pads...)."""
        if not self.has(i):
            return default
        v = self._raw(i)
        if isinstance(v, np.ndarray):
            return v
        if isinstance(v, Tensor) and v.data is not None and v.creator is None:
            return v.data
        raise NeedsValue(self.proto.input[i], self.name)

    def t(self, i: int) -> Tensor:
        """Input ``i`` as a Tensor: float initialisers become trainable Parameters (one per
        name, shared by every trace), other known values constant Tensors."""
        name = self.proto.input[i]
        if name in self._env and isinstance(self._env[name], Tensor):
            return self._env[name]
        if name not in self._env and name in self._program.initializers:
            arr = self._program.initializers[name]
            if arr.dtype.kind == "f":
                return self._store.parameter(name, arr)
        return constant(self._raw(i), name)

    def buffer(self, i: int) -> Tensor:
        """Input ``i`` as a non-trainable state tensor (BatchNorm running statistics)."""
        name = self.proto.input[i]
        if name not in self._env and name in self._program.initializers:
            return self._store.buffer(name, self._program.initializers[name])
        return self.t(i)

    def shape(self, i: int) -> tuple:
        v = self._raw(i)
        return tuple(v.shape)

    def dtype(self, i: int) -> np.dtype:
        return np.dtype(self._raw(i).dtype)

    def fail(self, what: str):
        raise UnsupportedOpError(f"{self.op_type} node {self.name!r}: {what} is not "
                                 "supported yet")


def _move_constants(outs, device, keep) -> None:
    """Move the constants the import functions made (on the default device) to the
    model's ``device``, where its parameters live and its plans run. Each trace makes its
    own constants, so moving them in place touches nothing shared; the fed tensors
    (``keep``: their ids) are the caller's and stay where they are."""
    seen: set[int] = set(keep)
    stack = [o for o in outs if isinstance(o, Tensor)]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if t.creator is not None:
            stack.extend(t.creator.inputs)
        elif t.data is not None and not isinstance(t, Parameter) and t.device != device:
            t.to_device(device)


def constant(value, name=None) -> Tensor:
    """A constant (non-trainable) Tensor holding ``value``."""
    if isinstance(value, Tensor):
        return value
    arr = np.asarray(value)
    try:
        return Tensor(data=arr, requires_grad=False, name=name)
    except DTypeError as e:
        raise UnsupportedOpError(f"tensor {name!r}: {e}") from None


def scalar_like(value, like) -> Tensor:
    """A 0-d constant holding ``value`` in the dtype of the Tensor ``like``."""
    return constant(np.asarray(value, dtype=like.dtype))
