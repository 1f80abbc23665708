"""What every picture draws, extracted once from a Graph, a plan or a Model.

:func:`extract` turns its argument into a :class:`View`: the nodes (with their role, layer
scope and step), the leaves (inputs, parameters, state), the edges (one per tensor read, with
shape and dtype), and, for a compiled plan, the schedule and the buffers of the arena (offset,
size, first and last step, producer, last reader, workspace or not). The format modules only
read a View, so the DOT, JSON, HTML, SVG and snapshot dumps agree by construction.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import GraphError

ROLES = ("input", "parameter", "state", "output", "forward", "backward", "update")


@dataclass
class VNode:
    """One op node. ``step`` is its position in the schedule (None without a plan)."""

    name: str
    op: str
    role: str
    scope: str | None
    step: int | None
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    seconds: float | None = None
    recompute: bool = False  # a clone computing a forward value again (passes/remat.py)


@dataclass
class VLeaf:
    """A tensor no node produces: a graph input, a parameter, or state (optimizer state,
    running statistics, hyperparameters, constants)."""

    name: str
    role: str
    shape: tuple
    dtype: str
    nbytes: int


@dataclass
class VEdge:
    """``tensor`` flows from ``src`` (a node or leaf name) to node ``dst``."""

    src: str
    dst: str
    tensor: str
    shape: tuple
    dtype: str


@dataclass
class VBuffer:
    """One arena buffer: a storage group (a tensor plus its aliases and in-place outputs), or
    a kernel workspace, which lives exactly one step."""

    id: int
    tensor: str
    tensors: list[str]
    shape: tuple
    dtype: str
    offset: int
    size: int
    first: int
    last: int
    producer: str
    last_reader: str
    role: str
    workspace: bool = False
    recomputed: bool = False  # written by a recompute node


@dataclass
class View:
    """Everything the formats draw. ``schedule``, ``buffers``, ``live`` and ``report`` are
    empty for a bare Graph."""

    name: str
    nodes: list[VNode]
    leaves: list[VLeaf]
    edges: list[VEdge]
    schedule: list[str] = field(default_factory=list)
    buffers: list[VBuffer] = field(default_factory=list)
    persistent: list[VLeaf] = field(default_factory=list)
    live: list[int] = field(default_factory=list)
    report: dict = field(default_factory=dict)
    profile: dict | None = None

    @property
    def arena_bytes(self) -> int:
        return int(self.report.get("arena_bytes", 0))

    @property
    def lower_bound(self) -> int:
        return int(self.report.get("lower_bound_bytes", 0))

    def to_dict(self) -> dict:
        return asdict(self)


def dtype_name(dt) -> str:
    return np.dtype(dt).name


def short_dtype(dt) -> str:
    """``f32``, ``i64``...: short enough for an edge label."""
    d = np.dtype(dt)
    return "bool" if d.kind == "b" else f"{d.kind}{d.itemsize * 8}"


def op_text(n: VNode) -> str:
    """The op as pictures name it: ``Conv2d+ReLU`` for a convolution the fusion pass gave a
    ReLU epilogue."""
    return n.op + ("+ReLU" if n.attrs.get("relu") == "True" else "")


def shape_text(shape) -> str:
    return "x".join(str(s) for s in shape) if shape else "scalar"


def _resolve(obj):
    """``(graph, memory plan or None, execution plan or None)`` of what ``dump`` was given."""
    from ..ir.graph import Graph
    from ..passes.memory import MemoryPlan

    if isinstance(obj, Graph):
        return obj, None, None
    if isinstance(obj, MemoryPlan):
        return obj.groups.graph, obj, None
    if hasattr(obj, "memory") and hasattr(obj, "graph") and hasattr(obj, "steps"):
        return obj.graph, obj.memory, obj
    if hasattr(obj, "plans") and hasattr(obj, "last_plan"):  # a Model
        plan = obj.last_plan or (obj.plans[-1] if obj.plans else None)
        if plan is None:
            raise GraphError("the model has no compiled plan yet: call it once, or use "
                             "model.plan_for(x, y), then dump the model or that plan")
        return plan.graph, plan.memory, plan
    raise TypeError(f"viz.dump takes a Graph, an ExecutionPlan, a MemoryPlan or a Model, not "
                    f"{type(obj).__name__}")


def _roles(graph) -> dict[int, str]:
    """``node id -> role``: optimizer updates run asap; nodes the non-update outputs depend
    on are the forward; the rest is the backward."""
    roles = {n.id: "update" for n in graph.nodes if n.op.run_asap}
    stack = [t.creator for t in graph.outputs
             if t.creator is not None and t.creator.id not in roles]
    while stack:
        n = stack.pop()
        if roles.get(n.id) == "forward":
            continue
        roles[n.id] = "forward"
        stack.extend(x.creator for x in n.inputs if x.creator is not None)
    return {n.id: roles.get(n.id, "backward") for n in graph.nodes}


def _leaf_role(t, inputs) -> str:
    if any(t is i for i in inputs):
        return "input"
    return "parameter" if t.stores_grad else "state"


def _scope(n) -> str | None:
    """The node's layer; an optimizer update belongs to its parameter's layer."""
    s = getattr(n, "scope", None)  # nodes made by passes may carry none
    if s is None and n.op.run_asap and n.op.mutates:
        owner, _, _ = n.inputs[n.op.mutates[0]].name.rpartition(".")
        s = owner or None
    return s


def _attr_text(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def extract(obj, profile=None) -> View:
    """The :class:`View` of a Graph, ExecutionPlan, MemoryPlan or Model.

    Args:
        obj: what to draw. A Model gives its most recent plan.
        profile: a :class:`~singa_graph.runtime.plan.Profile` to show; by default the plan's
            most recent ``profile()`` result, if any.
    """
    graph, memory, plan = _resolve(obj)
    if profile is None and plan is not None:
        profile = getattr(plan, "last_profile", None)
    roles = _roles(graph)
    rec = (memory.recomputed() if memory is not None and hasattr(memory, "recomputed")
           else getattr(graph, "recomputed", None)) or {}
    step_of = {n.id: i for i, n in enumerate(memory.order)} if memory is not None else {}
    seconds = ({r.name: r.seconds for r in profile.rows} if profile is not None else None)
    nodes = [VNode(name=n.name, op=n.label, role=roles[n.id], scope=_scope(n),
                   step=step_of.get(n.id), inputs=[x.name for x in n.inputs],
                   outputs=[o.name for o in n.outputs],
                   attrs={k: _attr_text(v) for k, v in n.op.attributes().items()},
                   seconds=None if seconds is None else seconds.get(n.name),
                   recompute=n.id in rec)
             for n in graph.nodes]
    leaves = [VLeaf(t.name, _leaf_role(t, graph.inputs), tuple(t.shape), dtype_name(t.dtype),
                    int(t.nbytes)) for t in graph.leaves()]
    prod = graph.producer()
    edges = []
    for n in graph.nodes:
        for x in n.inputs:
            p = prod.get(id(x))
            edges.append(VEdge(p.name if p is not None else x.name, n.name, x.name,
                               tuple(x.shape), dtype_name(x.dtype)))
    view = View(name=graph.name, nodes=nodes, leaves=leaves, edges=edges)
    if seconds is not None:
        view.profile = {"total_seconds": float(profile.total),
                        "by_type": [[t, int(c), float(s)] for t, c, s in profile.by_type]}
    if memory is not None:
        view.schedule = [n.name for n in memory.order]
        view.report = dict(memory.report())
        if hasattr(memory, "breakdown"):  # which ops the workspace and kept bytes serve
            view.report.update(memory.breakdown())
        view.buffers = _buffers(memory, roles, rec)
        view.persistent = _persistent(memory, graph)
        view.live = _live(view.buffers, len(memory.order))
    return view


def _buffers(memory, roles, recomputed=None) -> list[VBuffer]:
    """The arena's buffers in placement order: storage groups, then kernel workspaces."""
    groups, order = memory.groups, memory.order
    members = groups.groups()
    out = []
    for g, (a, b) in sorted(memory.intervals.items(), key=lambda kv: (kv[1][0], kv[0])):
        root = groups.tensors[g]
        writer, reader = order[a], order[b]
        out.append(VBuffer(id=len(out), tensor=root.name,
                           tensors=[t.name for t in members[g]], shape=tuple(root.shape),
                           dtype=dtype_name(root.dtype), offset=int(memory.offsets[g]),
                           size=int(groups.size(g)), first=a, last=b, producer=writer.name,
                           last_reader=reader.name, role=roles[writer.id],
                           recomputed=writer.id in (recomputed or {})))
    # kernel workspaces (MemoryPlan.workspace: step -> (offset, nbytes)), one step each
    for step, (off, nbytes) in sorted((getattr(memory, "workspace", None) or {}).items()):
        n = order[step]
        out.append(VBuffer(id=len(out), tensor=f"{n.name}.workspace", tensors=[],
                           shape=(int(nbytes),), dtype="uint8", offset=int(off),
                           size=int(nbytes), first=int(step), last=int(step), producer=n.name,
                           last_reader=n.name, role=roles[n.id], workspace=True))
    return out


def _persistent(memory, graph) -> list[VLeaf]:
    """Buffers outside the arena: inputs, parameters, state and outputs, one per group."""
    groups = memory.groups
    out = []
    for g, members in groups.groups().items():
        if not groups.persistent(g):
            continue
        leaf = next((t for t in members if t.creator is None), None)
        t = leaf if leaf is not None else groups.tensors[g]
        role = _leaf_role(t, graph.inputs) if leaf is not None else "output"
        out.append(VLeaf(t.name, role, tuple(t.shape), dtype_name(t.dtype),
                         int(groups.size(g))))
    return out


def _live(buffers, steps: int) -> list[int]:
    """Live bytes at each step, workspaces included."""
    delta = [0] * (steps + 1)
    for b in buffers:
        delta[b.first] += b.size
        delta[b.last + 1] -= b.size
    live, cur = [], 0
    for d in delta[:steps]:
        cur += d
        live.append(cur)
    return live
