"""Graphs: the nodes that produce a set of outputs, in creation (program) order."""
from __future__ import annotations

import contextlib

import networkx as nx

from ..errors import GraphError
from . import node as _node
from .tensor import Placeholder, Tensor


class Graph:
    """A dataflow graph of :class:`Node` objects.

    Built from its outputs: every node that an output depends on (through ``creator`` links)
    belongs to the graph, ordered by creation, which is program order. Passes such as autodiff
    and the optimizer add nodes through :meth:`capture`.

    Attributes:
        nodes: the nodes in creation order.
        inputs: the Placeholders the graph reads (fed at run time).
        outputs: the tensors the caller asked for.
    """

    def __init__(self, outputs, inputs=None, name: str = "graph"):
        self.name = name
        self.outputs = list(outputs)
        seen, stack = {}, [t.creator for t in self.outputs if t.creator is not None]
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen[n.id] = n
            stack.extend(x.creator for x in n.inputs if x.creator is not None)
        self.nodes = [seen[k] for k in sorted(seen)]
        found = self._placeholders()
        if inputs is None:
            self.inputs = found
        else:
            self.inputs = list(inputs)
            missing = [t.name for t in found if all(t is not i for i in self.inputs)]
            if missing:
                raise GraphError(f"graph {name!r} reads placeholders not listed as inputs: "
                                 f"{missing}")

    # ------------------------------------------------------------------ building
    @contextlib.contextmanager
    def capture(self):
        """Append every node created inside the block to this graph (in creation order)."""
        new: list = []
        _node.capture_stack().append(new)
        try:
            yield new
        finally:
            _node.capture_stack().pop()
            self.nodes.extend(new)

    def add_outputs(self, *tensors: Tensor) -> None:
        for t in tensors:
            if all(t is not o for o in self.outputs):
                self.outputs.append(t)

    # ------------------------------------------------------------------ queries
    def tensors(self) -> list[Tensor]:
        """Every tensor read or written by a node, each once, leaves first then in node order."""
        out, seen = [], set()
        for t in self.leaves() + [o for n in self.nodes for o in n.outputs]:
            if id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def leaves(self) -> list[Tensor]:
        """Tensors that no node of the graph produces: inputs, parameters, constants, state."""
        produced = {id(o) for n in self.nodes for o in n.outputs}
        out, seen = [], set()
        for n in self.nodes:
            for x in n.inputs:
                if id(x) not in produced and id(x) not in seen:
                    seen.add(id(x))
                    out.append(x)
        for t in self.outputs:
            if id(t) not in produced and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    def _placeholders(self) -> list[Placeholder]:
        """The Placeholders among :meth:`leaves`, in the same order, in one walk: ops make
        plain Tensors, so a Placeholder is never a node's output and is always a leaf."""
        out, seen = [], set()
        for t in (x for n in self.nodes for x in n.inputs):
            if isinstance(t, Placeholder) and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        for t in self.outputs:
            if isinstance(t, Placeholder) and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        return out

    @property
    def parameters(self) -> list[Tensor]:
        """Leaf tensors whose gradients are stored (``stores_grad``), in first-use order."""
        return [t for t in self.leaves() if t.stores_grad]

    def consumers(self) -> dict[int, list]:
        """``id(tensor) -> [nodes reading it]``, in node order."""
        cons: dict[int, list] = {}
        for n in self.nodes:
            for x in n.inputs:
                lst = cons.setdefault(id(x), [])
                if not lst or lst[-1] is not n:
                    lst.append(n)
        return cons

    def producer(self) -> dict[int, object]:
        return {id(o): n for n in self.nodes for o in n.outputs}

    # ------------------------------------------------------------------ checks & export
    def validate(self) -> None:
        """Raise :class:`GraphError` unless every input of a node is a leaf or produced by an
        earlier node, names are unique and the graph has no cycle.

        One walk over the nodes: when every input is a leaf or an earlier node's output (and
        each output has one creator), the node list is a topological order, so the graph has
        no cycle; a cycle shows up as a node reading what a later node produces."""
        first_writer: dict[int, int] = {}  # id(tensor) -> position of its first producer
        for p, n in enumerate(self.nodes):
            for o in n.outputs:
                first_writer.setdefault(id(o), p)
        names = set()
        for p, n in enumerate(self.nodes):
            if n.name in names:
                raise GraphError(f"duplicate node name {n.name!r}")
            names.add(n.name)
            for x in n.inputs:
                w = first_writer.get(id(x))
                if w is not None:
                    if w >= p:  # produced, but by no earlier node
                        raise GraphError(f"node {n.name} reads {x.name} before it is "
                                         "produced")
                    # an earlier node's output: its creator was checked there
                elif x.creator is None and x.data is None and not isinstance(x, Placeholder):
                    raise GraphError(f"node {n.name} reads {x.name}, a symbolic tensor with "
                                     "no producer")
            for o in n.outputs:
                if o.creator is not n:
                    raise GraphError(f"output {o.name} of {n.name} has another creator")
        # a graph output that no node produces is a leaf (a model may return its input)

    def to_networkx(self) -> nx.DiGraph:
        """A DiGraph over node names; an edge u -> v carries the tensors v reads from u."""
        g = nx.DiGraph()
        prod = self.producer()
        for n in self.nodes:
            g.add_node(n.name, op=n.type, node=n)
        for n in self.nodes:
            for x in n.inputs:
                p = prod.get(id(x))
                if p is not None:
                    if g.has_edge(p.name, n.name):
                        g.edges[p.name, n.name]["tensors"].append(x.name)
                    else:
                        g.add_edge(p.name, n.name, tensors=[x.name])
        return g

    def summary(self) -> str:
        """A readable table of the nodes: name, op, input and output shapes."""
        lines = [f"Graph {self.name}: {len(self.nodes)} nodes, {len(self.inputs)} inputs, "
                 f"{len(self.parameters)} parameters"]
        for n in self.nodes:
            ins = ", ".join(str(x.shape) for x in n.inputs)
            outs = ", ".join(str(o.shape) for o in n.outputs)
            lines.append(f"  {n.name:<28} {n.type:<22} ({ins}) -> ({outs})")
        return "\n".join(lines)

    def __repr__(self):
        return f"Graph({self.name!r}, {len(self.nodes)} nodes)"
