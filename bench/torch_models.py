"""PyTorch side of bench/step_time.py: the same architectures as torch.nn modules, a runner
that times a torch training step, and the measurement of its step's peak memory.

Imported only by the PyTorch worker process of the benchmark.
"""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as tF

LR = 0.01
MOMENTUM = 0.9


class TorchMLP(tnn.Module):
    def __init__(self, n_in=784, hidden=(256, 256), num_classes=10):
        super().__init__()
        sizes = (n_in,) + tuple(hidden)
        self.hidden = tnn.ModuleList(tnn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.out = tnn.Linear(sizes[-1], num_classes)

    def forward(self, x):
        x = x.flatten(1)
        for lin in self.hidden:
            x = tF.relu(lin(x))
        return self.out(x)

class TorchCNN(tnn.Module):
    """zoo.CNN(bn=False, branches=False): conv-relu-pool, conv-relu-pool, linear."""

    def __init__(self, in_ch=1, hw=28, channels=(16, 32), num_classes=10):
        super().__init__()
        c1, c2 = channels
        self.conv1 = tnn.Conv2d(in_ch, c1, 3, padding=1)
        self.conv2 = tnn.Conv2d(c1, c2, 3, padding=1)
        self.fc = tnn.Linear(c2 * (hw // 4) * (hw // 4), num_classes)

    def forward(self, x):
        y = tF.max_pool2d(tF.relu(self.conv1(x)), 2, 2)
        y = tF.max_pool2d(tF.relu(self.conv2(y)), 2, 2)
        return self.fc(y.flatten(1))

def _bn(c):
    # singa_graph's momentum weights the new batch, as torch's does; same eps
    return tnn.BatchNorm2d(c, eps=1e-5, momentum=0.9)

class TorchBasicBlock(tnn.Module):
    """zoo.BasicBlock: conv3x3-bn-relu, conv3x3-bn, shortcut (1x1 conv-bn when the
    shape changes), add, relu; convs without bias."""

    def __init__(self, c_in, c, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(c_in, c, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _bn(c)
        self.conv2 = tnn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = _bn(c)
        if stride != 1 or c_in != c:
            self.down = tnn.Conv2d(c_in, c, 1, stride=stride, bias=False)
            self.down_bn = _bn(c)
        else:
            self.down = None

    def forward(self, x):
        y = tF.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = self.down_bn(self.down(x)) if self.down is not None else x
        return tF.relu(y + skip)

class TorchResNet(tnn.Module):
    def __init__(self, in_ch=3, widths=(16, 32, 64), blocks=1, num_classes=10):
        super().__init__()
        self.stem = tnn.Conv2d(in_ch, widths[0], 3, padding=1, bias=False)
        self.stem_bn = _bn(widths[0])
        stages, prev = [], widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                stages.append(TorchBasicBlock(prev, w, 2 if (i > 0 and b == 0) else 1))
                prev = w
        self.stages = tnn.ModuleList(stages)
        self.fc = tnn.Linear(prev, num_classes)

    def forward(self, x):
        y = tF.relu(self.stem_bn(self.stem(x)))
        for blk in self.stages:
            y = blk(y)
        return self.fc(tF.adaptive_avg_pool2d(y, 1).flatten(1))

def torch_model(name, kw, shape):
    if name == "mlp":
        return TorchMLP(int(np.prod(shape[1:])), **kw)
    if name == "cnn":
        return TorchCNN(shape[1], shape[2], **{k: v for k, v in kw.items()
                                               if k == "channels"})
    if name == "resnet":
        return TorchResNet(shape[1], **kw)
    raise KeyError(name)


def copy_params_to_torch(sg_model, tmodel) -> None:
    """Copy singa_graph's initial parameters into the torch model (same order; Linear
    weights are stored transposed in singa_graph), so the first losses can be compared."""
    sg_params = list(sg_model.get_params().values())
    t_params = list(tmodel.parameters())
    if len(sg_params) != len(t_params):
        raise RuntimeError(f"parameter count differs: singa_graph {len(sg_params)}, "
                           f"torch {len(t_params)}")
    with torch.no_grad():
        for p, tp in zip(sg_params, t_params):
            a = np.asarray(p.data)
            if a.ndim == 2:  # Linear: (in, out) in singa_graph, (out, in) in torch
                a = a.T
            if tuple(a.shape) != tuple(tp.shape):
                raise RuntimeError(f"{p.name}: shape {p.shape} vs torch {tuple(tp.shape)}")
            tp.copy_(torch.from_numpy(np.ascontiguousarray(a)))


class TorchRunner:
    def __init__(self, name, kw, x, y):
        torch.manual_seed(0)
        self.model = torch_model(name, kw, x.shape)
        self.model.train()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=MOMENTUM)
        self.x = torch.from_numpy(x)
        self.y = torch.from_numpy(y.astype(np.int64))
        self.first_loss = None

    def _fwd_bwd_update(self):
        out = self.model(self.x)
        loss = tF.cross_entropy(out, self.y)
        loss.backward()
        self.opt.step()
        return loss

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        return self._fwd_bwd_update()

    def warm(self, n):
        t0 = time.perf_counter()
        self.first_loss = float(self.step().item())
        first = time.perf_counter() - t0
        for _ in range(n - 1):
            self.step()
        return first

    def persistent_bytes(self) -> int:
        ts = list(self.model.parameters()) + list(self.model.buffers()) + [self.x, self.y]
        for st in self.opt.state.values():
            ts += [v for v in st.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in ts)

    def step_peak_bytes(self) -> tuple[int, str]:
        """Peak bytes allocated during one step above its starting level, and its label."""
        self.opt.zero_grad(set_to_none=True)
        try:
            return self._profiled_peak()
        except Exception as e:  # noqa: BLE001 - private profiler structures may change
            print(f"  (torch profiler memory events unusable: {type(e).__name__}: {e}; "
                  f"printing an estimate)")
            return self._estimate(), "estimate"

    def _profiled_peak(self) -> tuple[int, str]:
        from torch.profiler import ProfilerActivity, profile

        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                                      record_shapes=False) as prof:
            self._fwd_bwd_update()
        sizes, exact = _allocation_events(prof)
        run = peak = 0
        for _, nbytes in sizes:
            run += nbytes
            peak = max(peak, run)
        grads = sum(p.grad.numel() * p.grad.element_size() for p in self.model.parameters()
                    if p.grad is not None)
        if peak < grads:  # every gradient was allocated during the step: must be counted
            raise RuntimeError(f"profiled peak {peak} B is below the gradient bytes {grads} B")
        return peak, "profiler" if exact else "profiler-ops"

    def _estimate(self) -> int:
        """Bytes of tensors saved for backward (distinct storages) plus gradient bytes."""
        self.opt.zero_grad(set_to_none=True)
        saved: dict[int, int] = {}
        params = {p.untyped_storage().data_ptr() for p in self.model.parameters()}

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in params and ptr != self.x.untyped_storage().data_ptr():
                saved[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            self._fwd_bwd_update()
        grads = sum(p.grad.numel() * p.grad.element_size() for p in self.model.parameters())
        return sum(saved.values()) + grads


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ side logs start/stop lines there)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _allocation_events(prof) -> tuple[list[tuple[int, int]], bool]:
    """``(time_ns, bytes)`` of every CPU allocation (+) and free (-) the profiler recorded,
    in time order, and whether they are the exact events. The exact events come from the
    profiler's event tree; the public FunctionEvent list folds them into the enclosing ops
    (placed at the op's start), so it is only the fallback."""
    try:
        from torch._C._profiler import _EventType

        out = []
        stack = list(prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            e = stack.pop()
            if e.tag == _EventType.Allocation:
                f = e.extra_fields
                if str(f.device).startswith("cpu"):
                    out.append((e.start_time_ns, int(f.alloc_size)))
            stack.extend(e.children)
        if out:
            return sorted(out), True
    except (ImportError, AttributeError):
        pass
    # fallback: each event's self memory at its start time (approximate ordering)
    evs = [(int(e.time_range.start * 1000), int(e.self_cpu_memory_usage))
           for e in prof.events() if e.self_cpu_memory_usage]
    if not evs:
        raise RuntimeError("the profiler recorded no memory events")
    return sorted(evs), False
