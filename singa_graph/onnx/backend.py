"""An ``onnx.backend.base.Backend`` that runs ONNX models as compiled singa_graph plans.

``SingaBackend.prepare(model)`` checks the model and returns a :class:`SingaRep`; each
``rep.run(inputs)`` with new input shapes traces the graph, compiles a plan and caches it.
Integer inputs that decide shapes (a Reshape target fed as an input) are values known while
building, so each distinct value compiles its own plan.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ..errors import GraphError
from ..ir.graph import Graph
from ..ir.tensor import Placeholder, Tensor
from ..passes.compile import compile as _compile
from .imported import Initializers
from .program import NeedsValue, Program


def _device(device):
    """A Device from ONNX's names (``"CPU"``, ``"CUDA"``, ``"CUDA:1"``) or a Device."""
    from ..runtime.device import get_default_device, parse

    if device is None:
        return get_default_device()
    if isinstance(device, str):
        return parse(device)  # DeviceError for an unknown name or a missing GPU
    return device


def _sources(program, name) -> set[str]:
    """The fed inputs that the value ``name`` is computed from (a Loop's trip count computed
    from float inputs: those inputs are then values known while building)."""
    producer = {o: n for n in program.graph.node for o in n.output if o}
    todo, seen, found = [name], set(), set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in program.inputs:
            found.add(v)
        elif v in producer:
            todo.extend(x for x in producer[v].input if x)
    return found


def _structured(x):
    """A sequence input as a list of arrays, an empty optional as None."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [_structured(e) for e in x]
    return x.to_numpy() if isinstance(x, Tensor) else np.asarray(x)


def _fingerprint(x):
    if x is None:
        return None
    if isinstance(x, list):
        return ("seq",) + tuple(_fingerprint(e) for e in x)
    return (x.shape, x.dtype.str, x.tobytes())


class SingaRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns the outputs as numpy arrays."""

    def __init__(self, program: Program, device=None):
        super().__init__()
        self.program = program
        self.device = _device(device)
        self.store = Initializers(self.device)
        # sequence and optional inputs are values known while building (their lengths
        # and presence decide the graph), so each one compiles a plan of its own
        self._static: set[str] = {n for n in program.inputs if program.input_info[n].type.
                                  WhichOneof("value") in ("sequence_type", "optional_type")}
        self._structured = set(self._static)
        self._plans: dict = {}

    def _feeds(self, inputs) -> list[np.ndarray]:
        names = self.program.inputs
        if isinstance(inputs, dict):
            missing = [n for n in names if n not in inputs]
            if missing:
                raise GraphError(f"missing inputs {missing}; the model takes {names}")
            inputs = [inputs[n] for n in names]
        if isinstance(inputs, (np.ndarray, Tensor)):
            inputs = [inputs]
        inputs = list(inputs)
        arrays = [_structured(x) if n in self._structured else
                  x.to_numpy() if isinstance(x, Tensor) else np.asarray(x)
                  for n, x in zip(names, inputs)]
        self.program.check_inputs([() if n in self._structured else a.shape
                                   for n, a in zip(names, arrays)])
        return arrays

    def _key(self, arrays):
        return tuple(_fingerprint(a) if n in self._structured else
                     (a.shape, a.dtype.str, a.tobytes() if n in self._static else None)
                     for n, a in zip(self.program.inputs, arrays))

    def run(self, inputs, **kwargs):
        """Run the model on ``inputs`` (a list in input order, or a dict by name)."""
        arrays = self._feeds(inputs)
        entry = self._plans.get(self._key(arrays))
        if entry is None:
            entry = self._build(arrays)
            self._plans[self._key(arrays)] = entry
        plan, outs, dynamic = entry
        fetched = iter(plan.run([a for a, d in zip(arrays, dynamic) if d]) if plan else ())

        def value(o):  # sequences are lists, empty optionals None
            if isinstance(o, list):
                return [value(e) for e in o]
            return next(fetched) if isinstance(o, Tensor) else o

        return [value(o) for o in outs]

    def _build(self, arrays):
        while True:
            feeds, dynamic, phs = {}, [], []
            for name, a in zip(self.program.inputs, arrays):
                if name in self._static:
                    feeds[name] = a
                    dynamic.append(False)
                else:
                    ph = Placeholder(a.shape, a.dtype, device=self.device, name=name)
                    feeds[name] = ph
                    phs.append(ph)
                    dynamic.append(True)
            try:
                outs = self.program.trace(feeds, self.store, training=False)
                break
            except NeedsValue as e:
                # inputs that decide shapes or attributes here are values known now
                more = ({e.value_name} if e.value_name in self.program.inputs else
                        _sources(self.program, e.value_name) or
                        {n for n, a in zip(self.program.inputs, arrays)
                         if n not in self._structured and a.dtype.kind in "iub"})
                if more <= self._static:
                    raise
                self._static |= more
                self.program.check_supported(self._static)
        def known(o):  # constants become arrays; sequences stay lists of their elements
            if isinstance(o, list):
                return [known(e) for e in o]
            if isinstance(o, Tensor) and o.creator is None and o.data is not None:
                return o.data
            return o if isinstance(o, Tensor) or o is None else np.asarray(o)

        def flat(o):
            return [t for e in o for t in flat(e)] if isinstance(o, list) else \
                [o] if isinstance(o, Tensor) else []

        outs = [known(o) for o in outs]
        symbolic = [t for o in outs for t in flat(o)]
        plan = None
        if symbolic:
            plan = _compile(Graph(symbolic, inputs=phs, name=self.program.graph.name),
                            fetches=symbolic, device=self.device)
        return plan, outs, dynamic


class SingaBackend(Backend):
    """ONNX's backend interface over singa_graph (what ``onnx.backend.test`` drives)."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> SingaRep:
        return SingaRep(Program.read(model), device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA where a GPU (or numba's CUDA simulator) can run kernels."""
        name = str(device).upper()
        if name.startswith("CPU"):
            return True
        if name.startswith("CUDA"):
            from ..runtime import gpu

            return gpu.available()
        return False

    @classmethod
    def run_node(cls, node, inputs, device="CPU", outputs_info=None, **kwargs):
        from onnx import helper

        arrays = [np.asarray(x) for x in inputs]
        names = [n for n in node.input if n]
        graph = helper.make_graph(
            [node], "node",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                           a.shape) for n, a in zip(names, arrays)],
            [helper.make_empty_tensor_value_info(o) for o in node.output if o])
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.prepare(model, device).run(arrays)


prepare = SingaBackend.prepare
run_model = SingaBackend.run_model
run_node = SingaBackend.run_node
supports_device = SingaBackend.supports_device
