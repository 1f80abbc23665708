"""Run one op's kernel on the CPU and on the CUDA device and compare what they write.

A :class:`Case` is an op instance and its input arrays. The harness binds each device's
kernel with the registry's own ``bind`` (workspace sized by the kernel's declaration, as a
plan does), runs it once and compares every output, and every input the op mutates in
place (optimizer updates, running statistics), within float tolerance; a case may run the
bound step several times first (updates whose state carries over between runs).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from singa_graph.ir.tensor import Tensor
from singa_graph.runtime import registry


@dataclass
class Case:
    """One kernel check: ``op`` applied to ``inputs`` (numpy arrays)."""

    op: object
    inputs: list
    rtol: float = 1e-5
    atol: float = 1e-6
    name: str = ""
    compare: list = field(default=None)  # output indices to compare (default: all)
    steps: int = 1  # runs of the bound step before comparing (state carried between runs)
    prepare: object = None  # prepare(device, input arrays): run first (e.g. start a channel)

    @property
    def id(self) -> str:
        return self.name or self.op.type


def _run(case, device):
    ins = [device.put(np.array(a, copy=True)) for a in case.inputs]
    specs = case.op.infer(*[Tensor(data=np.asarray(a), requires_grad=False)
                            for a in case.inputs])
    outs = [device.empty(s.shape, s.dtype) for s in specs]
    for o in outs:  # a kernel must write every element: start from garbage-like values
        if np.dtype(o.dtype).kind == "f":
            device.fill(o, np.nan)
    for o, i in case.op.alias.items():  # views, as in a plan and in eager mode
        outs[o] = ins[i].reshape(tuple(specs[o].shape))
    kind = device.kind
    need = registry.workspace_bytes(case.op, ins, outs, kind)
    ws = device.arena(need) if need else None
    if ws is not None:
        device.fill(ws, 0xFF)  # NaN bytes: a kernel that reads scratch it never wrote fails
    with device.activate():
        if case.prepare is not None:
            case.prepare(device, ins)
        step = registry.bind(case.op, ins, outs, kind, ws)
        for _ in range(case.steps):
            step()
        device.synchronize()
    mutated = [device.get(ins[k]) for k in case.op.mutates]
    return [device.get(o) for o in outs], mutated


def check(case, gpu):
    """Assert that the CUDA kernel of ``case.op`` computes what its CPU kernel computes."""
    from singa_graph.runtime.device import get_default_device

    cpu_out, cpu_mut = _run(case, get_default_device())
    gpu_out, gpu_mut = _run(case, gpu)
    idx = range(len(cpu_out)) if case.compare is None else case.compare
    for i in idx:
        assert gpu_out[i].shape == cpu_out[i].shape and gpu_out[i].dtype == cpu_out[i].dtype
        np.testing.assert_allclose(gpu_out[i], cpu_out[i], rtol=case.rtol, atol=case.atol,
                                   err_msg=f"{case.id}: output {i}")
    for k, (a, b) in enumerate(zip(gpu_mut, cpu_mut)):
        np.testing.assert_allclose(a, b, rtol=case.rtol, atol=case.atol,
                                   err_msg=f"{case.id}: mutated input {case.op.mutates[k]}")


def rand(*shape, seed=0, low=-1.0, high=1.0, dtype=np.float32):
    """Uniform random values of ``shape`` (reproducible by ``seed``)."""
    rng = np.random.default_rng(seed + 7919 * len(shape) + sum(shape))
    return rng.uniform(low, high, shape).astype(dtype)
