"""The search behind rematerialisation: which values to drop, and when to compute them again.

:class:`Problem` reads a graph run in a given order into integer tables, one entry per step:
the steps whose outputs it reads, the arena bytes its outputs own, its kernel workspace, its
estimated time (:mod:`.cost`), whether it may run twice, and until which step it may (the
*barrier*: a clone must run before anything overwrites what it reads, such as an optimizer
update of a weight).

:func:`simulate` runs the order step by step under a byte budget, keeping the bytes of the
values held plus the running step's outputs and workspace within it. When a step needs room,
a held value is *evicted* (its bytes freed) and computed again just before its next use, from
values held then (computing those again first if they were evicted too). Which value goes is
the policy:

* ``'dtr'``: the value with the smallest ``cost / (bytes x distance to its next use)``, the
  heuristic of Dynamic Tensor Rematerialization (Kirisame et al., ICLR 2021), with the time
  to the next use in place of the time since the last one (a compiler knows the future) and
  the cost including evicted inputs that would have to be computed again with it;
* ``'chen'``: no budget; a fixed set of values is dropped after its early uses, every
  ``sqrt(m)``-th candidate kept as a checkpoint (Chen et al., 2016, "Training deep nets with
  sublinear memory cost").

The result is a list of *events* ``(stage, step)``: before the node of step ``stage`` runs,
the node of step ``step`` runs again. :mod:`.remat` turns events into recompute nodes.
"""
from __future__ import annotations

import bisect
import math

from . import cost
from .placement import align

# ops that draw random numbers: computing them again would draw new ones
RANDOM_OPS = frozenset({"Dropout"})


class Infeasible(Exception):
    """No eviction makes room at some step (or recomputation would exceed its cap)."""


def recomputable(node, persistent_output: bool) -> bool:
    """Whether ``node`` may run a second time with the same result and no side effect.
    Training BatchNorm writes running statistics; its clone writes scratch ones instead."""
    op = node.op
    if persistent_output or node.type in RANDOM_OPS or getattr(op, "seed", None) is not None:
        return False
    if op.run_asap or op.run_late or getattr(op, "starts_comm", False):
        return False
    if op.mutates and node.type != "BatchNorm2d":
        return False
    return True


class Problem:
    """The tables of one graph and order (see the module docstring).

    Values are the transient output tensors (persistent ones are never dropped). Per value
    ``v``: ``node[v]`` (the step producing it), ``size[v]`` (aligned arena bytes; 0 for a
    view), ``base[v]`` (for a view, the value whose bytes it shows; else -1), ``children[v]``
    (its views), ``uses[v]`` (steps reading it, its views' readers included). Per step
    ``s``: ``ins[s]``/``outs[s]`` (values read/written), ``ws`` (aligned workspace), ``cost``
    (seconds), ``flops``, ``ok`` (may run again), ``barrier`` (last stage a clone may run
    at), ``inplace`` (``(input value, output value)`` pairs its op may overwrite).
    """

    def __init__(self, graph, order, groups, workspace: dict):
        t = groups.tables
        self.order = list(order)
        n = self.n = len(order)
        steps = groups.positions(order)
        persistent, root, size, view = t.persistent, t.root, t.size, t.view
        mutators: dict[int, list[int]] = {}  # group -> steps mutating it
        for s, p in enumerate(steps):
            for k in t.mutated[p]:
                mutators.setdefault(root[k], []).append(s)
        value: dict[int, int] = {}  # tensor index -> value
        self.node, self.size, self.base, self.uses = [], [], [], []
        self.ins, self.outs, self.ws, self.cost, self.flops = [], [], [], [], []
        self.ok, self.barrier, self.inplace = [], [], []
        for s, p in enumerate(steps):
            node = order[s]
            ins = sorted({value[k] for k in t.inputs[p] if k in value})
            self.ins.append(ins)
            for v in ins:
                self.uses[v].append(s)
            outs, pers = [], False
            for i, o in enumerate(node.outputs):
                k = t.index[id(o)]
                if persistent[root[k]]:
                    pers = True
                    continue
                v = value[k] = len(self.node)
                self.node.append(s)
                self.uses.append([])
                self.size.append(0 if view[k] else align(size[k]))
                src = next((node.inputs[j] for oo, j in node.op.alias.items() if oo == i),
                           None) if view[k] else None
                self.base.append(value.get(t.index[id(src)], -1) if src is not None else -1)
                outs.append(v)
            self.outs.append(outs)
            self.ws.append(align(workspace[s]) if workspace.get(s) else 0)
            self.cost.append(cost.seconds(node))
            self.flops.append(cost.flops(node))
            self.ok.append(recomputable(node, pers))
            self.inplace.append([(value[t.index[id(node.inputs[j])]],
                                  value[t.index[id(node.outputs[o])]])
                                 for o, j in node.op.inplace.items()
                                 if t.index[id(node.inputs[j])] in value
                                 and t.index[id(node.outputs[o])] in value])
            skip = {t.index[id(node.inputs[i])] for i in (3, 4)} if (
                node.type == "BatchNorm2d" and node.op.mutates) else set()
            bar = n
            for k in t.inputs[p]:
                ms = () if k in skip else mutators.get(root[k], ())
                i = bisect.bisect_right(ms, s)
                if i < len(ms):
                    bar = min(bar, ms[i])
            self.barrier.append(bar)
        # a clone may pull in clones of its inputs: their barriers hold for it too
        for s in range(n):
            for v in self.ins[s]:
                if self.ok[self.node[v]]:
                    self.barrier[s] = min(self.barrier[s], self.barrier[self.node[v]])
        # a view keeps its base's bytes alive: the base is used wherever the view is
        self.children: list[list[int]] = [[] for _ in self.node]
        for v in reversed(range(len(self.node))):
            b = self.base[v]
            if b >= 0:
                self.children[b].append(v)
                self.uses[b].extend(self.uses[v])
        for u in self.uses:
            u.sort()

    def base_chain(self, v):
        """The bases of the view value ``v``, nearest first."""
        b = self.base[v]
        while b >= 0:
            yield b
            b = self.base[b]


class _Sim:
    """One run of the order under a budget (see :func:`simulate`)."""

    def __init__(self, prob: Problem, budget: float, cap: int):
        m = len(prob.node)
        self.p, self.budget, self.cap = prob, budget, cap
        self.resident = [False] * m
        self.evicted = [False] * m
        self.lock = [0] * m
        self.uses = [list(u) for u in prob.uses]
        self.pseudo: list[list[int]] = [[] for _ in range(m)]
        self.mem = 0
        self.peak = 0
        self.t = 0
        self.events: list[tuple[int, int]] = []
        self.held: set[int] = set()  # resident values that could be evicted

    # ---------------------------------------------------------------- bookkeeping
    def _add_uses(self, d, steps):
        stack = [d]
        while stack:
            x = stack.pop()
            for u in steps:
                bisect.insort(self.uses[x], u)
            if not self.resident[x] and not self.evicted[x]:
                self.evicted[x] = True  # freed, but needed again: computed again then
            if self.evicted[x]:
                self.pseudo[x].extend(steps)
                stack.extend(self.p.ins[self.p.node[x]])

    def _drop_use(self, d, u):
        lst = self.uses[d]
        i = bisect.bisect_left(lst, u)
        if i < len(lst) and lst[i] == u:
            del lst[i]

    def _free_if_dead(self, x):
        if self.resident[x] and not self.uses[x] and not self.lock[x]:
            self.resident[x] = False
            self.mem -= self.p.size[x]
            self.held.discard(x)
        elif self.evicted[x] and not self.uses[x]:
            self.evicted[x] = False  # nothing needs it any more

    def _evictable(self, x) -> bool:
        p = self.p
        if self.lock[x] or not self.uses[x] or self.uses[x][-1] > p.barrier[p.node[x]]:
            return False
        if not self._recoverable(p.ins[p.node[x]], self.uses[x][-1]):
            return False
        stack = list(p.children[x])
        while stack:  # its views go with it: none may be in use
            c = stack.pop()
            if self.lock[c]:
                return False
            stack.extend(p.children[c])
        return True

    def _recoverable(self, values, until) -> bool:
        """Whether ``values`` are held, or can be computed again at any stage up to
        ``until`` from what is held (values already freed may be, if they may run again)."""
        p = self.p
        seen, stack = set(), list(values)
        while stack:
            d = stack.pop()
            if d in seen or self.resident[d] or self.evicted[d]:
                continue
            seen.add(d)
            s = p.node[d]
            if not p.ok[s] or until > p.barrier[s]:
                return False
            stack.extend(p.ins[s])
        return True

    def evict(self, x):
        p = self.p
        self.resident[x] = False
        self.evicted[x] = True
        self.mem -= p.size[x]
        self.held.discard(x)
        # what x is computed from must stay available until x's last use
        steps = list(self.uses[x])
        self.pseudo[x] = steps
        for d in p.ins[p.node[x]] if steps else ():
            self._add_uses(d, steps)
        stack = list(p.children[x])
        while stack:  # views of evicted bytes are gone too (their uses are x's)
            c = stack.pop()
            if self.resident[c]:
                self.resident[c] = False
                self.evicted[c] = True
            stack.extend(p.children[c])

    def _score(self, x) -> float:
        p = self.p
        s = p.node[x]
        c = p.cost[s] + sum(p.cost[p.node[d]] for d in p.ins[s] if self.evicted[d])
        return c / (p.size[x] * max(self.uses[x][0] - self.t, 1))

    def make_room(self, need):
        while self.mem + need > self.budget:
            best, score = -1, math.inf
            for x in self.held:
                if self._evictable(x):
                    s = self._score(x)
                    if s < score or (s == score and x < best):
                        best, score = x, s
            if best < 0:
                raise Infeasible
            self.evict(best)

    # ---------------------------------------------------------------- computing
    def _compute(self, s, again):
        p = self.p
        new = [v for v in p.outs[s] if not self.resident[v]]
        credit = 0
        if not again:  # an input dying here may hold the output (in-place)
            for x, y in p.inplace[s]:
                if (p.base[x] < 0 and p.size[x] == p.size[y] and self.lock[x] == 1
                        and all(u == s for u in self.uses[x])):
                    credit += p.size[x]
        need = sum(p.size[v] for v in new)
        self.make_room(need + p.ws[s] - credit)
        self.mem += need
        self.peak = max(self.peak, self.mem + p.ws[s] - credit)
        for v in p.outs[s]:
            self.resident[v] = True
            self.evicted[v] = False
            if p.size[v] and p.ok[s] and p.base[v] < 0:
                self.held.add(v)
        if again:
            self.events.append((self.t, s))
            if len(self.events) > self.cap:
                raise Infeasible
            for v in p.outs[s]:
                steps, self.pseudo[v] = self.pseudo[v], []
                for d in p.ins[s]:
                    for u in steps:
                        self._drop_use(d, u)

    def ensure(self, z):
        """Make value ``z`` resident, computing evicted ones again (inputs first)."""
        if self.resident[z]:
            return
        if not self.evicted[z]:
            raise AssertionError(f"value {z} is needed after it was freed")
        p = self.p
        stack = [[p.node[z], 0]]
        while stack:
            fr = stack[-1]
            s = fr[0]
            ds = p.ins[s]
            if fr[1] < len(ds):
                d = ds[fr[1]]
                if self.resident[d]:
                    self.lock[d] += 1
                    fr[1] += 1
                elif self.evicted[d]:
                    stack.append([p.node[d], 0])
                else:
                    raise AssertionError(f"value {d} is needed after it was freed")
                continue
            self._compute(s, again=True)
            for d in ds:
                self.lock[d] -= 1
            for d in ds:
                self._free_if_dead(d)
            for v in p.outs[s]:
                self._free_if_dead(v)
            stack.pop()

    def step(self, t, drop=()):
        p = self.p
        self.t = t
        ds = p.ins[t]
        for d in ds:
            self.ensure(d)
            self.lock[d] += 1
        self._compute(t, again=False)
        for d in ds:
            self.lock[d] -= 1
        for d in ds:
            self._drop_use(d, t)
            for b in p.base_chain(d):
                self._drop_use(b, t)
        for x in ds:
            self._free_if_dead(x)
            for b in p.base_chain(x):
                self._free_if_dead(b)
        for v in p.outs[t]:
            self._free_if_dead(v)
        for x in drop:
            if self.resident[x] and self._evictable(x):
                self.evict(x)


def simulate(prob: Problem, budget: float = math.inf, policy: str = "dtr",
             cap: int | None = None, drops: set | None = None):
    """``(events, simulated peak bytes)`` of running ``prob``'s order within ``budget``
    (see the module docstring); raises :class:`Infeasible` when it cannot. ``cap``: the most
    recompute events allowed (default: as many as there are steps). ``drops``
    (policy ``'chen'``): the values dropped after their early uses."""
    sim = _Sim(prob, budget, prob.n if cap is None else cap)
    drop_at: dict[int, list[int]] = {}
    if policy == "chen":
        for x in sorted(drops or ()):
            drop_at.setdefault(split_step(prob, x), []).append(x)
    for t in range(prob.n):
        sim.step(t, drop_at.get(t, ()))
    return sim.events, sim.peak


def split_step(prob: Problem, x: int) -> int:
    """The step after which value ``x`` waits longest for its next use (the end of its
    forward uses, in a training step)."""
    pts = [prob.node[x]] + [u for u in prob.uses[x] if u > prob.node[x]]
    best, at = -1, prob.node[x]
    for a, b in zip(pts, pts[1:]):
        if b - a > best:
            best, at = b - a, a
    return at


def chen_drops(prob: Problem) -> set:
    """Chen et al.'s rule: of the values that wait between uses, keep every
    ``round(sqrt(m))``-th as a checkpoint and drop the others."""
    # values read early (after their producer) and again late: dropping one read only
    # right after it is made would compute it twice for nothing
    cands = [v for v in range(len(prob.node)) if prob.ok[prob.node[v]] and prob.size[v]
             and prob.node[v] < split_step(prob, v) < (prob.uses[v][-1] if prob.uses[v]
                                                      else -1)]
    k = max(1, round(math.sqrt(len(cands))))
    return {s for i, s in enumerate(cands) if i % k != k - 1}


def recompute_seconds(prob: Problem, events) -> float:
    return sum(prob.cost[s] for _, s in events)

