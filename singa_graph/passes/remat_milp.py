"""The exact rematerialisation choice for small graphs: Checkmate's integer program.

Following Jain et al. (MLSys 2020), with the order fixed, stage ``t`` runs step ``t`` and,
before it, recomputes any earlier steps. Binary variables:

* ``R[t, i]``: step ``i`` is computed in stage ``t`` (``R[t, t] = 1``);
* ``S[t, i]``: step ``i``'s outputs are held from stage ``t - 1`` into stage ``t``.

Constraints: what stage ``t`` computes has its inputs held or computed earlier in the same
stage; a value held into stage ``t + 1`` was held into or computed in stage ``t``; a step
that may not run twice (Dropout, optimizer updates, ...) is computed only at its own stage,
and a clone never after its barrier (:mod:`.remat_search`). Memory: the bytes held into a
stage plus everything the stage computes, workspace included, stay within the budget (an
upper bound of the stage's true peak, exact for stages that recompute nothing). Objective:
the least total estimated time of the recomputations.

Solved by SciPy's ``milp`` (HiGHS) within a time limit; the best solution found by then is
used, and None is returned when there is none.
"""
from __future__ import annotations

import numpy as np

from .remat_search import Problem


def solve(prob: Problem, budget: int, time_limit: float = 10.0):
    """Events ``(stage, step)`` (as :func:`.remat_search.simulate` returns) of the cheapest
    recomputation keeping every stage within ``budget`` bytes, or None."""
    from scipy.optimize import LinearConstraint, milp
    from scipy.sparse import coo_matrix

    n = prob.n
    var: dict[tuple, int] = {}  # ('R'|'S', t, i) -> column

    def col(kind, t, i):
        k = (kind, t, i)
        if k not in var:
            var[k] = len(var)
        return var[k]

    # R[t, i] (i < t) only where step i may run again by stage t; S[t, v] for the values
    # of steps before t
    may = [[i for i in range(t) if prob.ok[i] and prob.barrier[i] >= t] for t in range(n)]
    for t in range(n):
        for i in may[t]:
            col("R", t, i)
        for i in range(t):
            for v in prob.outs[i]:
                col("S", t, v)
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def add(terms, low, high):
        nonlocal r
        for c, v in terms:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(low)
        hi.append(high)
        r += 1

    def computed(t, i):
        """Terms of 'step i computed in stage t' (None: always, i == t)."""
        if i == t:
            return None
        c = var.get(("R", t, i))
        return [] if c is None else [(c, 1.0)]

    for t in range(n):
        for i in may[t] + [t]:
            for v in prob.ins[i]:
                # R[t, i] <= S[t, v] + R[t, node(v)]  (1 <= ... for the stage's own step)
                terms = [(var[("S", t, v)], 1.0)] + (computed(t, prob.node[v]) or [])
                if i == t:
                    add(terms, 1.0, np.inf)
                else:
                    add(terms + [(var[("R", t, i)], -1.0)], 0.0, np.inf)
        if t + 1 < n:
            for i in range(t + 1):
                c = computed(t, i)
                for v in prob.outs[i]:
                    # S[t+1, v] <= S[t, v] + R[t, node(v)]
                    terms = [(var[("S", t + 1, v)], 1.0)]
                    if i < t:
                        terms.append((var[("S", t, v)], -1.0))
                    if c is None:
                        add(terms, -np.inf, 1.0)
                    else:
                        add(terms + [(k, -1.0) for k, _ in c], -np.inf, 0.0)
        held = []
        for i in range(t):
            for v in prob.outs[i]:
                b = prob.base[v]
                if b >= 0:  # a view held holds its base's bytes
                    add([(var[("S", t, v)], 1.0), (var[("S", t, b)], -1.0)], -np.inf, 0.0)
                elif prob.size[v]:
                    held.append((var[("S", t, v)], float(prob.size[v])))
        made = [(var[("R", t, i)], float(sum(prob.size[v] for v in prob.outs[i]) + prob.ws[i]))
                for i in may[t]]
        own = sum(prob.size[v] for v in prob.outs[t]) + prob.ws[t]
        add(held + [m for m in made if m[1]], -np.inf, float(budget - own))
    if any(h < 0 for h in hi):
        return None
    cost = np.zeros(len(var))
    for (kind, t, i), c in var.items():
        if kind == "R":
            cost[c] = prob.cost[i] + 1e-9  # ties: fewer clones
    a = coo_matrix((vals, (rows, cols)), shape=(r, len(var))).tocsr()
    res = milp(cost, constraints=LinearConstraint(a, lo, hi), integrality=np.ones(len(var)),
               bounds=(0, 1), options={"time_limit": float(time_limit), "presolve": True})
    if res.x is None:
        return None
    x = np.round(res.x).astype(int)
    events = [(t, i) for t in range(n) for i in may[t] if x[var[("R", t, i)]]]
    return events
