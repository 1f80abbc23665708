"""``Model``: SINGA's Model API on top of compiled execution plans.

A subclass defines ``forward(x)`` and ``train_one_batch(x, y)`` (which calls the loss and
``self.optimizer(loss)``), exactly as in SINGA. With ``use_graph=True`` the first call for a
given mode and input shape traces the method on Placeholders, producing one graph with the
forward, the backward and the parameter updates; the compiled plan is cached and every later
call with the same shapes only feeds data and runs it. A new batch size compiles and caches
a second plan. With ``use_graph=False`` the same methods run eagerly.
"""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict

import numpy as np

from . import autograd
from . import checkpoint as _checkpoint
from .errors import MemoryBudgetError
from .ir.graph import Graph
from .ir.op import building
from .ir.tensor import Placeholder, Tensor
from .layer import Layer
from . import opt as _opt
from .opt import Optimizer
from .passes.compile import compile as _compile
from .passes.compile import gc_paused
from .runtime.checks import check_feed_values, transaction
from .runtime.device import get_default_device

_lock_guard = threading.Lock()


def _locked(method):
    """Run ``method`` holding the model's lock (see :attr:`Model.lock`)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self.lock:
            return method(self, *args, **kwargs)

    return locked


def _flat(out):
    if isinstance(out, Tensor):
        return [out], None
    if isinstance(out, (list, tuple)):
        return list(out), type(out)
    raise TypeError(f"train_one_batch/forward must return a Tensor or a tuple of Tensors, got "
                    f"{type(out).__name__}")


def _matches(signature, args) -> bool:
    """Whether ``args`` are numpy arrays of the ``(shape, dtype)`` pairs of ``signature``."""
    if len(args) != len(signature):
        return False
    for a, (shape, dtype) in zip(args, signature):
        if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype:
            return False
    return True


def _results(outs, kind):
    """A plan's fetched arrays as the method's return value: one Tensor, or ``kind`` (the
    tuple or list type the traced method returned) of them."""
    res = [Tensor.holding(o) for o in outs]
    return res[0] if kind is None else kind(res)


def _input_dtype(a) -> np.dtype:
    """numpy's default float64 data feeds float32 models, as in SINGA's from_numpy."""
    return np.dtype(np.float32) if a.dtype == np.float64 else a.dtype


def _as_array(v):
    """The data of an argument; a Placeholder (no data) stands for itself: shape and dtype."""
    if isinstance(v, Tensor):
        return v if v.data is None else v.data
    return np.asarray(v)


class Model(Layer):
    """Base class of trainable models (SINGA's ``model.Model``).

    Call :meth:`compile` once, then ``model(x, y)`` in training mode (runs
    ``train_one_batch``) or ``model(x)`` in eval mode (runs ``forward``).
    """

    #: compiled plans kept at most (least recently used dropped first); each holds an arena
    max_plans: int = 8

    def __init__(self, name=None):
        super().__init__()
        self.training = True
        self.graph_mode = True
        self.schedule = "memory"
        self._plans: OrderedDict = OrderedDict()
        self.poison = False
        self._last_plan = None
        self.optimizer: Optimizer | None = getattr(self, "optimizer", None)
        # moves with every training step (plans write parameters in place, unseen by
        # Tensor.writes): eval plans then recompute what they folded from them
        self._state_version = 0

    # ------------------------------------------------------------------ configuration
    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Attach the optimizer that ``train_one_batch`` calls."""
        self.optimizer = optimizer

    @_locked
    def compile(self, inputs, is_train: bool = True, use_graph: bool = True,
                sequential: bool = False, schedule: str | None = None,
                poison: bool = False, memory_budget=None, remat: str = "auto") -> None:
        """Initialise parameters from the input shapes and choose the execution mode.

        Args:
            inputs: example inputs of ``forward`` (Tensors, arrays or Placeholders); only
                their shapes and dtypes are used, no data is needed.
            is_train: start in training mode (``train()``) or eval mode.
            use_graph: compile and run whole steps as scheduled graphs; False runs eagerly.
            sequential: SINGA's flag: run graphs in program order (``schedule='sequential'``).
            schedule: ``'sequential'``, ``'topological'`` or ``'memory'`` (the default).
            poison: debugging aid: fill dead arena regions with NaN after every step, so a
                read of a freed buffer shows up as NaN.
            memory_budget: the most bytes each plan's arena (workspace included) may take:
                bytes, ``"64MiB"`` or ``"50%"`` (of the plan without a budget). Forward
                values are recomputed during the backward to meet it (graph mode only); a
                budget below the smallest feasible one raises :class:`MemoryBudgetError`,
                naming it, when the plan is built (the first call), before any step runs.
            remat: how recomputed values are chosen: ``'auto'``, ``'milp'``, ``'dtr'`` or
                ``'chen'`` (see :mod:`singa_graph.passes.remat`).
        """
        if memory_budget is not None:
            if not use_graph:
                raise MemoryBudgetError(
                    "memory_budget needs graph mode (use_graph=True): eager mode runs one op "
                    "at a time and has no plan to fit in a budget")
            from .passes.remat import METHODS, parse_budget

            parse_budget(memory_budget, reference=1)  # malformed budgets fail here
            if remat not in METHODS:
                raise ValueError(f"unknown rematerialisation method {remat!r}; choose one "
                                 f"of {METHODS}")
        self.memory_budget = memory_budget
        self.remat = remat
        self.poison = bool(poison)
        self.graph_mode = bool(use_graph)
        self.schedule = schedule or ("sequential" if sequential else "memory")
        self._plans.clear()
        self.__dict__["_hot"] = None
        first = inputs[0] if inputs else None
        object.__setattr__(self, "_device",
                           first.device if isinstance(first, Tensor) else self.device)
        phs = [self._placeholder(x, i) for i, x in enumerate(inputs)]
        self._onnx_inputs = phs  # input shapes for ONNX export and save()
        with building():
            self.forward(*phs)  # layers create their parameters from the shapes they see
        for name, p in self.get_params().items():
            p.name = name
        for name, t in self.get_states().items():
            t.name = name
        self.train(is_train)

    def train(self, mode=True, y=None):
        """``train()`` / ``train(False)``: switch training mode on or off (BatchNorm batch
        statistics, Dropout), as SINGA 3. ``train(x, y)``: run one compiled training step on
        data, the define-then-run flow of SINGA issue #696; returns ``(out, loss)``."""
        if isinstance(mode, (bool, np.bool_)) and y is None:
            self.training = bool(mode)
            autograd.training = self.training
            return self
        return self.train_step(mode, y)

    def eval(self) -> "Model":
        """Switch to evaluation mode (running statistics, no dropout)."""
        return self.train(False)

    def graph(self, mode: bool = True, sequential: bool = False) -> None:
        """SINGA's switch between graph and eager execution."""
        if not mode and getattr(self, "memory_budget", None) is not None:
            raise MemoryBudgetError("this model was compiled with a memory_budget, which "
                                    "needs graph mode: eager mode cannot meet it")
        self.graph_mode = bool(mode)
        if sequential:
            self.schedule = "sequential"

    # ------------------------------------------------------------------ running
    @property
    def lock(self) -> threading.RLock:
        """Held while the model traces, runs a step or loads/saves a checkpoint: calls from
        several threads into one model run one after the other."""
        lk = self.__dict__.get("_model_lock")
        if lk is None:
            with _lock_guard:
                lk = self.__dict__.get("_model_lock")
                if lk is None:
                    lk = threading.RLock()
                    object.__setattr__(self, "_model_lock", lk)
        return lk

    def __call__(self, *args):
        with self.lock:
            hot = self.__dict__.get("_hot")
            if hot is not None and _matches(hot[0], args):
                return self._run_hot(hot, args)
            if self.training:
                return self._run("train_one_batch", args)
            return self._run("forward", args)

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if not name.startswith("_"):  # mode, schedule, optimizer...: ask again next call
            self.__dict__["_hot"] = None

    def _run_hot(self, hot, args):
        """An inference call on arrays of the shapes and dtypes of the last one: its plan,
        found without the checks and the cache search of :meth:`_run`, which took half of
        the 45 us that small models' calls spent outside their kernels (mnasnet0_5, the
        small ViT: 0.43-0.55 ms a call). ``args`` match the plan's inputs exactly, so the
        plan only copies them in (ExecutionPlan.run_ready)."""
        _, plan, kind = hot
        plan.refresh_folded(self._state_version)
        outs = plan.run_ready(args)
        self.__dict__["_last_plan"] = plan  # not through Layer's __setattr__: 10 us cold
        return _results(outs, kind)

    def _remember_hot(self, args, entry) -> None:
        """Keep ``entry`` for :meth:`_run_hot` after an inference call on numpy arrays by a
        plan that writes no state, in a model that is not data-parallel; any change of a
        public attribute (mode, schedule, optimizer) or of the plan cache forgets it."""
        plan, kind, optimizers = entry
        if (self.training or optimizers or plan._mutates_state or self._distributed()
                is not None or not all(type(a) is np.ndarray for a in args)):
            return
        self.__dict__["_hot"] = (tuple((a.shape, a.dtype) for a in args), plan, kind)

    def _placeholder(self, x, i) -> Placeholder:
        """A Placeholder with ``x``'s shape and dtype, on the device of the Tensor ``x`` (on
        the model's device for arrays: the device its parameters live on)."""
        if isinstance(x, Placeholder):
            return x
        if isinstance(x, Tensor):
            return Placeholder(x.shape, _input_dtype(x), device=x.device, name=f"input{i}")
        a = np.asarray(x)
        return Placeholder(a.shape, _input_dtype(a), device=self.device, name=f"input{i}")

    @property
    def weight_copies(self) -> bool:
        """Whether inference plans may hold weights in the layouts of their faster kernels,
        in copies beside the parameters (the default, True; ``memory_report()``'s
        ``folded_bytes`` counts them: all 103 MiB of convnext_tiny's, imported from ONNX).
        False keeps one copy of every weight, at some speed (batch 2 at 64x64 on two
        threads: convnext_tiny 13.2 -> 30.5 ms, mobilenet_v2 1.41 -> 1.82).
        Setting it drops the compiled plans; the next call compiles again."""
        return self.__dict__.get("_weight_copies", True)

    @weight_copies.setter
    def weight_copies(self, value) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"weight_copies must be True or False, got {value!r}")
        with self.lock:
            if bool(value) != self.weight_copies:
                self._plans.clear()
                self.__dict__["_hot"] = None
                object.__setattr__(self, "_last_plan", None)
            object.__setattr__(self, "_weight_copies", bool(value))

    @property
    def device(self):
        """The device the model was compiled for: that of its first input."""
        return self.__dict__.get("_device") or get_default_device()

    def _run(self, method: str, args):
        for i, a in enumerate(args):
            a = _as_array(a)
            if isinstance(a, np.ndarray):
                check_feed_values(f"argument {i} of {method}", a, a.dtype,
                                  allow_empty=not self.training)
        if not self.graph_mode:
            self._sync_distributed()
            ts = [a if isinstance(a, Tensor) else
                  Tensor(data=np.asarray(a, _input_dtype(np.asarray(a))), device=self.device,
                         requires_grad=False)
                  for a in args]
            # a step that fails half-way restores every parameter, buffer and optimizer
            # state it wrote
            self._state_version += 1
            with autograd.training_mode(self.training), transaction():
                return getattr(self, method)(*ts)
        arrays = [_as_array(a) for a in args]
        entry = self._entry(method, args, arrays)
        plan, kind, optimizers = entry
        self._sync_distributed()
        plan.refresh_folded(self._state_version)
        self._state_version += plan._mutates_state
        outs = plan.run(arrays)
        for o in optimizers:
            o.step()
        self._last_plan = plan
        self._remember_hot(args, entry)
        return _results(outs, kind)

    @_locked
    def plan_for(self, *args):
        """The compiled plan that ``model(*args)`` runs in the current mode, compiled and
        cached now if needed; nothing is run (for inspection: graph, schedule, memory)."""
        method = "train_one_batch" if self.training else "forward"
        return self._entry(method, args, [_as_array(a) for a in args])[0]

    def _entry(self, method, args, arrays):
        """``(plan, output container type, optimizers)`` for these inputs, built once."""
        entry = self._cached(method, self.training, arrays)
        if entry is None:
            entry = self._build(method, args)
            self._remember(method, self.training, entry)
        return entry

    def _cached(self, method, training, arrays):
        """A cached plan for these input shapes whose input dtypes the data casts to safely
        (int64 labels feed an int32 placeholder; float64 images a float32 one)."""
        key = (method, training, self.schedule, tuple(a.shape for a in arrays))
        for entry in self._plans.get(key, ()):
            if all(a.dtype == t.dtype or np.can_cast(np.dtype(a.dtype), t.dtype, "same_kind")
                   for a, t in zip(arrays, entry[0].inputs)):
                self._plans.move_to_end(key)
                return entry
        return None

    def _remember(self, method, training, entry) -> None:
        """Cache a plan; beyond ``max_plans`` the least recently used ones are dropped (with
        their arenas)."""
        key = (method, training, self.schedule, tuple(t.shape for t in entry[0].inputs))
        self._plans.setdefault(key, []).append(entry)
        self._plans.move_to_end(key)
        self.__dict__["_hot"] = None
        limit = int(self.max_plans)
        if limit < 1:
            raise ValueError(f"max_plans must be >= 1, got {self.max_plans}")
        while sum(len(v) for v in self._plans.values()) > limit:
            oldest = next(iter(self._plans))
            entries = self._plans[oldest]
            dropped = entries.pop(0)
            if not entries:
                del self._plans[oldest]
            if dropped[0] is self._last_plan:
                self._last_plan = None

    def _build(self, method, args):
        phs = [self._placeholder(a, i) for i, a in enumerate(args)]
        state_before = self._optimizer_state_ids()
        _opt.take_graph_updates()
        with gc_paused():  # tracing makes many long-lived objects too (see gc_paused)
            with autograd.training_mode(self.training), building():
                outs, kind = _flat(getattr(self, method)(*phs))
            tokens, optimizers = _opt.take_graph_updates()
            graph = Graph(outs + tokens, inputs=phs, name=f"{type(self).__name__}.{method}")
            plan = _compile(graph, schedule=self.schedule, fetches=outs, poison=self.poison,
                            memory_budget=getattr(self, "memory_budget", None),
                            remat=getattr(self, "remat", "auto"),
                            weight_copies=self.weight_copies)
        # optimizer state that tracing this plan created (momentum buffers...) is memory
        # the plan brought into existence, so its report counts it
        plan.created_state_bytes = sum(
            t.nbytes for o in optimizers for t in o.state_tensors().values()
            if id(t) not in state_before)
        return plan, kind, optimizers

    def _optimizer_state_ids(self) -> set:
        return {id(t) for o in self._optimizers() for t in o.state_tensors().values()}

    # ------------------------------------------------------------------ SINGA #696 flow
    @_locked
    def construct_graph(self, x: Placeholder, y: Placeholder | None = None) -> None:
        """Build (and cache) the training graph from Placeholders before any data exists."""
        if not self.get_params():
            self.compile([x], is_train=True, use_graph=True, schedule=self.schedule)
        self.train()
        self._remember("train_one_batch", True,
                       self._build("train_one_batch", [x] if y is None else [x, y]))

    def train_step(self, x, y):
        """Run one compiled training step on numpy arrays or Tensors: ``(out, loss)``."""
        self.train(True)
        return self(x, y)

    @_locked
    def evaluate(self, x, y=None):
        """Run the compiled inference graph (eval mode) on ``x``; returns ``forward(x)``.

        With ``y`` and a ``loss(out, y)`` method on the model (the #696 style), the graph also
        computes the loss and ``(out, loss)`` is returned."""
        was = self.training
        self.eval()
        try:
            if y is None:
                return self(x)
            if not callable(getattr(self, "loss", None)):
                raise TypeError(f"evaluate(x, y) needs a loss(out, y) method on "
                                f"{type(self).__name__}; call evaluate(x) for the outputs")
            return self._run("_forward_and_loss", (x, y))
        finally:
            self.train(was)

    def _forward_and_loss(self, x, y):
        out = self.forward(x)
        return out, self.loss(out, y)

    # ------------------------------------------------------------------ reports
    @property
    def plans(self) -> list:
        """Every compiled ExecutionPlan cached so far (one per mode and input shape)."""
        return [e[0] for entries in self._plans.values() for e in entries]

    @property
    def last_plan(self):
        """The ExecutionPlan of the most recent graph-mode call, or None."""
        return self._last_plan

    def memory_report(self) -> dict:
        """The memory figures of the most recently run plan."""
        if self._last_plan is None:
            raise RuntimeError("no compiled plan has run yet; call the model first")
        return self._last_plan.memory_report()

    @_locked
    def profile(self, *args, repeat: int = 10):
        """Per-node timing of the plan that ``model(*args)`` runs (see ExecutionPlan.profile).

        Note that profiling a training plan runs ``repeat`` real training steps."""
        self(*args)
        return self._last_plan.profile([_as_array(a) for a in args], repeat=repeat)

    # ------------------------------------------------------------------ ONNX (SINGA #696)
    def save(self, path: str, state: dict | None = None) -> None:
        """Save the model as ONNX plus ``state`` in one file (see singa_graph.onnx.persist)."""
        from .onnx.persist import save_model
        save_model(self, path, state or {})

    def load(self, path: str, include_state: bool = False):
        """Copy the parameters saved by :meth:`save` into this model; the states if asked."""
        from .onnx.persist import load_model
        return load_model(self, path, include_state)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_tensors(self) -> dict[str, Tensor]:
        out = {f"state/{k}": t for k, t in self.get_states().items()}
        for o in self._optimizers():
            out.update({f"opt/{k}": t for k, t in o.state_tensors().items()})
        return out

    def _optimizers(self):
        found = [getattr(v, "opt", None) if self._is_dist(v) else v for v in vars(self).values()]
        return [o for o in found if isinstance(o, Optimizer)]

    @staticmethod
    def _is_dist(v) -> bool:
        # asked of the instance: on a type, a missing attribute took 0.4 us (18 values of
        # an imported model's attributes: 7 of the 30 us of an inference call's overhead)
        return getattr(v, "wraps_optimizer", False) is True

    def _distributed(self):
        """The DistOpt of a data-parallel model, or None."""
        return next((v for v in vars(self).values() if self._is_dist(v)), None)

    def _sync_distributed(self) -> None:
        """Before the first step of data-parallel training: rank 0's parameters, buffers and
        optimizer state to every rank."""
        d = self._distributed()
        if d is not None and not d.synced:
            d.sync(self)

    def save_states(self, fpath: str, aux_states: dict | None = None) -> None:
        """Save parameters, buffers, optimizer state and ``aux_states`` to a zip file.

        Aux states may be arrays, Tensors, numbers and strings (stored as arrays) or
        JSON-compatible values (dicts, lists); anything else raises :class:`CheckpointError`
        before a byte is written. The file is written under a temporary name and renamed into
        place, so ``fpath`` always holds the old or the new checkpoint; temporary files left
        by an interrupted save are removed by the next one.

        In data-parallel training (a DistOpt) only rank 0 writes; every rank returns once the
        file is complete.
        """
        dist = self._distributed()
        if dist is not None and dist.global_rank != 0:
            dist.communicator.barrier("checkpoint save (waiting for rank 0)")
            return
        with self.lock:
            _checkpoint.save(self, fpath, aux_states)
        if dist is not None:
            dist.communicator.barrier("checkpoint save")

    def load_states(self, fpath: str) -> dict:
        """Restore a checkpoint written by :meth:`save_states`; returns its aux states (as
        Tensors, as SINGA).

        The whole file is checked first: parameter, buffer and optimizer-state names, shapes
        and dtypes, the optimizer type and its hyperparameters. Any difference raises
        :class:`CheckpointError` naming ``fpath``, and changes nothing.
        """
        with self.lock:
            return _checkpoint.load(self, fpath)
