"""Optimizers (SINGA's ``opt`` module): SGD, Adam, RMSProp, AdaGrad and learning-rate schedules.

One update rule serves both modes. ``update(param, grad)`` calls an update op
(:mod:`singa_graph.ops.update`): with a concrete gradient the fused kernel runs at once; with a
graph-mode gradient the op becomes a node of the training graph. Hyperparameters live in 0-d
tensors that the kernels read at run time, so ``sgd.lr = 0.01`` between steps takes effect in
a compiled plan without recompiling.
"""
from __future__ import annotations

import threading

import numpy as np

from .ir.op import building, is_building
from .ir.tensor import Tensor
from .lr_schedules import Constant, DecayScheduler, ExponentialDecay, StepDecay  # noqa: F401
from .ops import update as _u
from .passes.autodiff import backward as _eager_backward
from .passes.autodiff import iter_gradients


class _Recorded(threading.local):
    """Graph-mode updates recorded while a model traces its training step, as (token,
    optimizer) pairs. Per thread: models tracing in different threads keep their own."""

    def __init__(self):
        self.updates: list = []


_recorded = _Recorded()


def record_graph_update(token: Tensor, optimizer: "Optimizer") -> None:
    """Keep a graph-mode update output (of ``optimizer``) so the traced graph lists it among
    its outputs and runs it."""
    _recorded.updates.append((token, optimizer))


def take_graph_updates() -> tuple[list[Tensor], list["Optimizer"]]:
    """Drain the update outputs recorded in graph mode by this thread, and the optimizers
    that made them."""
    updates = _recorded.updates
    toks = [t for t, _ in updates]
    opts = list({id(o): o for _, o in updates}.values())
    updates.clear()
    return toks, opts


# ---------------------------------------------------------------------------- optimizers
def check_hyper(cls_name: str, bounds: dict, k: str, v) -> None:
    """Refuse a hyperparameter value outside ``bounds[k] = (low, high)`` (``high`` exclusive
    when given; None for no upper bound), as PyTorch does; NaN is refused too."""
    lo, hi = bounds.get(k, (None, None))
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise TypeError(f"{cls_name}: {k} must be a number, got {v!r}") from None
    if x != x or (lo is not None and x < lo) or (hi is not None and x >= hi):
        want = f">= {lo}" if hi is None else f"in [{lo}, {hi})"
        raise ValueError(f"{cls_name}: invalid {k} {v!r}; it must be {want}")


class Optimizer:
    """Base class. Subclasses declare ``_hyper`` (names of scalar hyperparameters), the state
    they keep per parameter, and the update op they build."""

    _hyper: tuple = ()
    _bounds: dict = {"lr": (0.0, None), "weight_decay": (0.0, None), "epsilon": (0.0, None)}
    _slots: int = 1  # state tensors per parameter, shaped like it

    def __init__(self, lr=0.1, **hyper):
        # SINGA keeps the step count in a (1,) float32 Tensor; it is updated in place
        self.step_counter = Tensor(data=np.zeros(1, np.float32), requires_grad=False,
                                   name="opt.step_counter")
        self._tensors: dict[str, Tensor] = {}
        self._state: dict[int, list[Tensor]] = {}
        self._names: dict[int, str] = {}
        self._pending: dict[str, np.ndarray] = {}
        self.lr = lr
        for k, v in hyper.items():
            setattr(self, k, v)

    # hyperparameters are 0-d float64 tensors read by the kernels at run time
    def __setattr__(self, k, v):
        if k == "momentum" and v and self.__dict__.get("_use_momentum") is False:
            raise ValueError("this SGD was built without momentum buffers (momentum=0); "
                             "create it with a non-zero momentum to change momentum later")
        if k in ("lr",) + self._hyper:
            value = v.value(self._step_count()) if isinstance(v, DecayScheduler) else v
            check_hyper(type(self).__name__, self._bounds, k, value)
            if k == "lr":
                object.__setattr__(self, "_lr_sched",
                                   v if isinstance(v, DecayScheduler) else None)
            self._set_scalar(k, value)
        else:
            object.__setattr__(self, k, v)

    def __getattr__(self, k):
        if k in ("lr",) + type(self)._hyper:
            return float(self._scalar(k)[()])
        raise AttributeError(k)

    def _scalar(self, k) -> np.ndarray:
        """The host value of hyperparameter ``k`` (a 0-d float64 array)."""
        t = self.__dict__["_tensors"].get(k)
        if t is None:
            t = Tensor(data=np.zeros((), np.float64), requires_grad=False, name=f"opt.{k}")
            self.__dict__["_tensors"][k] = t
        return t.data

    def _set_scalar(self, k, value) -> None:
        """Set hyperparameter ``k`` on the host and in its copy on every device that
        updates run on, so compiled plans read the new value at their next step."""
        self._scalar(k)[()] = float(value)
        for (name, _), t in self.__dict__.get("_mirrors", {}).items():
            if name == k:
                t.copy_from_numpy(self._scalar(k))

    def _hyper_tensor(self, k, device) -> Tensor:
        """Hyperparameter ``k`` as the 0-d tensor that update ops on ``device`` read: the
        host tensor on the CPU, a device copy elsewhere (kept in step by _set_scalar)."""
        host = self._tensors[k]
        if device.kind == "cpu":
            return host
        mirrors = self.__dict__.setdefault("_mirrors", {})
        t = mirrors.get((k, device))
        if t is None:
            t = mirrors[(k, device)] = Tensor(data=host.data, device=device,
                                              requires_grad=False, name=f"opt.{k}")
        return t

    @property
    def lr_value(self) -> Tensor:
        """The current learning rate as a (1,) Tensor sharing the value the kernels read."""
        return Tensor(data=self._scalar("lr").reshape(1), requires_grad=False)

    def _step_count(self) -> int:
        return int(self.__dict__["step_counter"].data[0])

    def step(self) -> None:
        """Advance the step counter and the learning-rate schedule (SINGA's ``opt.step``)."""
        self.step_counter.data += 1
        sched = self.__dict__.get("_lr_sched")
        if sched is not None:
            self._set_scalar("lr", sched.value(self._step_count()))

    # state ------------------------------------------------------------------------------
    def _param_state(self, p: Tensor, n: int) -> list[Tensor]:
        st = self._state.get(id(p))
        if st is None:
            st = [Tensor(data=self._pending.pop(f"{p.name}/{i}", np.zeros(p.shape, p.dtype)),
                         device=p.device, requires_grad=False, name=f"{p.name}.opt{i}")
                  for i in range(n)]
            self._state[id(p)] = st
            self._names[id(p)] = p.name
        return st

    # updates ----------------------------------------------------------------------------
    def _op_and_inputs(self, p, g):
        raise NotImplementedError

    def update(self, param: Tensor, grad: Tensor) -> Tensor:
        """Apply one update of ``param`` with ``grad``: at once for concrete tensors, as a
        graph node for graph-mode tensors. Returns the update's output (an alias of the
        parameter) which a graph keeps as an output so the update runs."""
        op, ins = self._op_and_inputs(param, grad)
        tok = op(param, grad, *ins)
        if tok.data is None:
            record_graph_update(tok, self)
        return tok

    def apply(self, *args) -> Tensor:
        """SINGA's ``apply(param_name, param_value, param_grad)`` (``apply(param, grad)``
        also works): one update of the parameter with its gradient, as :meth:`update`."""
        if len(args) == 3:
            args = args[1:]
        if len(args) != 2:
            raise TypeError("apply takes (param_name, param, grad) or (param, grad)")
        return self.update(*args)

    def backward_and_update(self, loss: Tensor) -> None:
        """Backpropagate ``loss`` and update every parameter as soon as its gradient is final
        (the gradient is then dropped, so gradient memory stays small)."""
        if loss.data is None or is_building():
            with building():
                for p, g in iter_gradients(loss):
                    self.update(p, g)
        else:
            for p, g in _eager_backward(loss):
                self.update(p, g)
            self.step()

    __call__ = backward_and_update

    def take_update_tokens(self) -> list[Tensor]:
        """The graph-mode update outputs of this optimizer recorded since the last call, to
        list among a graph's outputs so the updates run."""
        updates = _recorded.updates
        mine = [t for t, o in updates if o is self]
        updates[:] = [(t, o) for t, o in updates if o is not self]
        return mine

    # checkpoints ------------------------------------------------------------------------
    def get_states(self) -> dict:
        """SINGA's layout: ``{"step_counter": float, <slot>: {param name: Tensor}, ...}``
        with SINGA's slot names (SGD ``moments``, RMSProp ``running_average``, AdaGrad
        ``history``, Adam ``m`` and ``v``), plus ``"hyper"``: the hyperparameters' current
        values (SINGA keeps them as constructor arguments). The Tensors are copies: later
        steps do not change what was returned. :meth:`set_states` takes it back."""
        out = {"step_counter": float(self._step_count())}
        for slot, per_param in self._slot_states().items():
            out[slot] = {name: Tensor(data=t.host_data().copy(), requires_grad=False)
                         for name, t in per_param.items()}
        out["hyper"] = {k: float(t.data) for k, t in self._tensors.items()}
        return out

    #: SINGA's names of the per-parameter state tensors, in slot order
    _slot_names: tuple = ("moments",)

    def _slot_states(self) -> dict[str, dict[str, Tensor]]:
        """``{slot name: {param name: state Tensor}}`` of the state created so far."""
        out: dict[str, dict[str, Tensor]] = {}
        for k, st in self._state.items():
            for i, t in enumerate(st):
                out.setdefault(self._slot_names[i], {})[self._names[k]] = t
        return out

    def state_tensors(self) -> dict[str, Tensor]:
        """Per-parameter state tensors keyed by ``<param name>/<slot>``."""
        return {f"{self._names[k]}/{i}": t for k, st in self._state.items()
                for i, t in enumerate(st)}

    def state_specs(self, params: dict) -> dict[str, tuple]:
        """``<param name>/<slot> -> (shape, dtype)`` of the full state this optimizer keeps
        for ``params`` (a name -> Tensor dict), created or not yet."""
        return {f"{n}/{i}": (p.shape, p.dtype) for n, p in params.items()
                for i in range(self._slots)}

    def hyper_states(self) -> dict[str, np.ndarray]:
        out = {k: t.data for k, t in self._tensors.items()}
        out["step_counter"] = np.asarray(self._step_count())
        return out

    def set_states(self, states: dict) -> None:
        """Restore what :meth:`get_states` returned (SINGA's layout: ``step_counter``, the
        slot dicts, here also ``hyper``). Every key is optional, as a SINGA user may give
        only ``{"step_counter": 5}``; values may be Tensors, arrays or numbers."""
        flat, hyper = {}, dict(states.get("hyper", {}))
        if "step_counter" in states:
            hyper["step_counter"] = _host(states["step_counter"])
        for slot, per_param in states.items():
            if slot in ("step_counter", "hyper"):
                continue
            if slot not in self._slot_keys():
                raise KeyError(f"{type(self).__name__}.set_states: unknown state {slot!r}; "
                               f"expected step_counter, hyper or one of {self._slot_keys()}")
            for name, v in per_param.items():
                flat[f"{name}/{self._slot_keys()[slot]}"] = _host(v)
        self.load_states(flat, hyper)

    def _slot_keys(self) -> dict[str, int | str]:
        """SINGA slot name -> the suffix of our ``<param name>/<suffix>`` state keys."""
        return {n: i for i, n in enumerate(self._slot_names)}

    def load_states(self, states: dict, hyper: dict | None = None) -> None:
        """Restore state saved by :meth:`state_tensors`/:meth:`hyper_states`. State of a
        parameter not updated yet is kept and used when its state is created."""
        mine = self.state_tensors()
        for k, v in states.items():
            if k in mine:
                mine[k].copy_from_numpy(v)
            else:
                self._pending[k] = np.array(v)
        hyper = hyper or {}
        for k, v in hyper.items():
            if k == "step_counter":
                self.step_counter.data[0] = int(np.asarray(v).reshape(-1)[0])
            else:
                self._set_scalar(k, v)
        sched = self.__dict__.get("_lr_sched")
        if "step_counter" in hyper and "lr" not in hyper and sched is not None:
            self._set_scalar("lr", sched.value(self._step_count()))  # SINGA: lr(step)


def _host(v) -> np.ndarray:
    """A state value given as a Tensor, an array or a number, as a host array."""
    return np.array(v.host_data() if isinstance(v, Tensor) else v)


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, dampening, weight decay and Nesterov
    momentum (PyTorch's formulation; momentum buffers start at zero)."""

    _hyper = ("momentum", "dampening", "weight_decay")
    _bounds = {**Optimizer._bounds, "momentum": (0.0, None), "dampening": (None, None)}

    def __init__(self, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 dtype=None):
        if nesterov and not momentum > 0:  # (unlike PyTorch, dampening is allowed, as SINGA)
            raise ValueError(f"SGD: nesterov momentum needs momentum > 0, got {momentum!r}")
        super().__init__(lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay)
        self.nesterov = nesterov
        self._use_momentum = momentum != 0.0

    @property
    def _slots(self):
        return 1 if self._use_momentum else 0

    def _op_and_inputs(self, p, g):
        st = self._param_state(p, 1 if self._use_momentum else 0)
        hyper = [self._hyper_tensor(k, p.device)
                 for k in ("lr", "momentum", "dampening", "weight_decay")]
        return _u.SGDUpdate(self._use_momentum, self.nesterov), st + hyper


class Adam(Optimizer):
    """Adam with bias correction; ``weight_decay`` adds L2 to the gradient."""

    _hyper = ("beta_1", "beta_2", "epsilon", "weight_decay")
    _bounds = {**Optimizer._bounds, "beta_1": (0.0, 1.0), "beta_2": (0.0, 1.0)}
    _slots = 2

    def __init__(self, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon,
                         weight_decay=weight_decay)

    def _op_and_inputs(self, p, g):
        m, v = self._param_state(p, 2)
        if id(p) not in self._steps:
            self._steps[id(p)] = Tensor(
                data=self._pending.pop(f"{p.name}/step", np.zeros((), np.float64)),
                device=p.device, requires_grad=False, name=f"{p.name}.step")
        hyper = [self._hyper_tensor(k, p.device)
                 for k in ("lr", "beta_1", "beta_2", "epsilon", "weight_decay")]
        return _u.AdamUpdate(), [m, v, self._steps[id(p)]] + hyper

    @property
    def _steps(self):
        d = self.__dict__.get("_step_tensors")
        if d is None:
            d = self.__dict__["_step_tensors"] = {}
        return d

    def state_tensors(self):
        out = super().state_tensors()
        out.update({f"{self._names[k]}/step": t for k, t in self._steps.items()})
        return out

    _slot_names = ("m", "v")

    def _slot_states(self):
        out = super()._slot_states()
        if self._steps:  # bias correction counts per parameter (SINGA: one step_counter)
            out["steps"] = {self._names[k]: t for k, t in self._steps.items()}
        return out

    def _slot_keys(self):
        return {**super()._slot_keys(), "steps": "step"}

    def state_specs(self, params):
        out = super().state_specs(params)
        out.update({f"{n}/step": ((), np.dtype(np.float64)) for n in params})
        return out


class RMSProp(Optimizer):
    """RMSProp: divide by a running root mean square of the gradient."""

    _hyper = ("rho", "epsilon", "weight_decay")
    _bounds = {**Optimizer._bounds, "rho": (0.0, None)}
    _slot_names = ("running_average",)

    def __init__(self, lr=0.01, rho=0.9, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr, rho=rho, epsilon=epsilon, weight_decay=weight_decay)

    def _op_and_inputs(self, p, g):
        st = self._param_state(p, 1)
        return _u.RMSPropUpdate(), st + [self._hyper_tensor(k, p.device) for k in
                                         ("lr", "rho", "epsilon", "weight_decay")]


class AdaGrad(Optimizer):
    """AdaGrad: divide by the root of the summed squared gradients."""

    _hyper = ("epsilon", "weight_decay")
    _slot_names = ("history",)

    def __init__(self, lr=0.01, epsilon=1e-8, weight_decay=0.0):
        super().__init__(lr, epsilon=epsilon, weight_decay=weight_decay)

    def _op_and_inputs(self, p, g):
        st = self._param_state(p, 1)
        return _u.AdaGradUpdate(), st + [self._hyper_tensor(k, p.device) for k in
                                         ("lr", "epsilon", "weight_decay")]


# SINGA's data-parallel wrapper; mpi4py (which starts MPI) is imported only when one is made
from .dist.opt import DistOpt  # noqa: E402,F401
