"""``Model``: SINGA's Model API on top of compiled execution plans.

A subclass defines ``forward(x)`` and ``train_one_batch(x, y)`` (which calls the loss and
``self.optimizer(loss)``), exactly as in SINGA. With ``use_graph=True`` the first call for a
given mode and input shape traces the method on Placeholders, producing one graph with the
forward, the backward and the parameter updates; the compiled plan is cached and every later
call with the same shapes only feeds data and runs it. A new batch size compiles and caches
a second plan. With ``use_graph=False`` the same methods run eagerly.
"""
from __future__ import annotations

import os
import tempfile
import zipfile

import numpy as np

from . import autograd
from .errors import CheckpointError
from .ir.graph import Graph
from .ir.op import building
from .ir.tensor import Placeholder, Tensor
from .layer import Layer
from . import opt as _opt
from .opt import Optimizer
from .passes.compile import compile as _compile
from .runtime.threads import blas_threads


def _flat(out):
    if isinstance(out, Tensor):
        return [out], None
    if isinstance(out, (list, tuple)):
        return list(out), type(out)
    raise TypeError(f"train_one_batch/forward must return a Tensor or a tuple of Tensors, got "
                    f"{type(out).__name__}")


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

    def __init__(self, name=None):
        super().__init__()
        self.training = True
        self.graph_mode = True
        self.schedule = "memory"
        self._plans: dict = {}
        self.poison = False
        self._last_plan = None
        self.optimizer: Optimizer | None = getattr(self, "optimizer", None)

    # ------------------------------------------------------------------ configuration
    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Attach the optimizer that ``train_one_batch`` calls."""
        self.optimizer = optimizer

    def compile(self, inputs, is_train: bool = True, use_graph: bool = True,
                sequential: bool = False, schedule: str | None = None,
                poison: bool = False) -> None:
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
        """
        self.poison = bool(poison)
        self.graph_mode = bool(use_graph)
        self.schedule = schedule or ("sequential" if sequential else "memory")
        self._plans.clear()
        phs = [self._placeholder(x, i) for i, x in enumerate(inputs)]
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
        self.graph_mode = bool(mode)
        if sequential:
            self.schedule = "sequential"

    # ------------------------------------------------------------------ running
    def __call__(self, *args):
        if self.training:
            return self._run("train_one_batch", args)
        return self._run("forward", args)

    @staticmethod
    def _placeholder(x, i) -> Placeholder:
        if isinstance(x, Placeholder):
            return x
        a = x if isinstance(x, Tensor) else np.asarray(x)
        return Placeholder(a.shape, _input_dtype(a), name=f"input{i}")

    def _run(self, method: str, args):
        if not self.graph_mode:
            autograd.training = self.training
            ts = [a if isinstance(a, Tensor) else
                  Tensor(data=np.asarray(a, _input_dtype(np.asarray(a))), requires_grad=False)
                  for a in args]
            with blas_threads(1):  # the thread policy of compiled plans, see runtime/threads
                return getattr(self, method)(*ts)
        arrays = [_as_array(a) for a in args]
        plan, kind, optimizers = self._entry(method, args, arrays)
        outs = plan.run(arrays)
        for o in optimizers:
            o.step()
        self._last_plan = plan
        res = [Tensor(data=o, requires_grad=False) for o in outs]
        return res[0] if kind is None else kind(res)

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
            if all(np.can_cast(np.dtype(a.dtype), t.dtype, "same_kind")
                   for a, t in zip(arrays, entry[0].inputs)):
                return entry
        return None

    def _remember(self, method, training, entry) -> None:
        key = (method, training, self.schedule, tuple(t.shape for t in entry[0].inputs))
        self._plans.setdefault(key, []).append(entry)

    def _build(self, method, args):
        phs = [self._placeholder(a, i) for i, a in enumerate(args)]
        autograd.training = self.training
        _opt.take_graph_updates()
        with building():
            outs, kind = _flat(getattr(self, method)(*phs))
        tokens, optimizers = _opt.take_graph_updates()
        graph = Graph(outs + tokens, inputs=phs, name=f"{type(self).__name__}.{method}")
        plan = _compile(graph, schedule=self.schedule, fetches=outs, poison=self.poison)
        return plan, kind, optimizers

    # ------------------------------------------------------------------ SINGA #696 flow
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

    def profile(self, *args, repeat: int = 10):
        """Per-node timing of the plan that ``model(*args)`` runs (see ExecutionPlan.profile).

        Note that profiling a training plan runs ``repeat`` real training steps."""
        self(*args)
        return self._last_plan.profile([_as_array(a) for a in args], repeat=repeat)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint_tensors(self) -> dict[str, Tensor]:
        out = {f"state/{k}": t for k, t in self.get_states().items()}
        for o in self._optimizers():
            out.update({f"opt/{k}": t for k, t in o.state_tensors().items()})
        return out

    def _optimizers(self):
        return [v for v in vars(self).values() if isinstance(v, Optimizer)]

    def _check_optimizer_states(self, data) -> list[str]:
        """Problems that loading the optimizer part of ``data`` would cause."""
        opts = self._optimizers()
        saved = str(data["meta/optimizer"]) if "meta/optimizer" in data else ""
        mine = ",".join(type(o).__name__ for o in opts)
        if saved != mine:
            return [f"checkpoint holds optimizer state of {saved or 'no optimizer'!r}, the "
                    f"model has {mine or 'no optimizer'!r}"]
        shapes = {name: p.shape for name, p in self.get_params().items()}
        problems = []
        for k, v in data.items():
            if not k.startswith("opt/"):
                continue
            pname, slot = k[4:].rsplit("/", 1)
            want = () if slot == "step" else shapes.get(pname)
            if want is None:
                problems.append(f"{k}: optimizer state of unknown parameter {pname!r}")
            elif v.shape != want:
                problems.append(f"{k}: shape {v.shape}, expected {want}")
        return problems

    def save_states(self, fpath: str, aux_states: dict | None = None) -> None:
        """Save parameters, buffers, optimizer state and ``aux_states`` to a zip file.

        The file is written under a temporary name and renamed into place, so an interrupted
        save never leaves a half-written checkpoint at ``fpath``.
        """
        arrays = {k: t.data for k, t in self._checkpoint_tensors().items()}
        for o in self._optimizers():
            arrays.update({f"opthyper/{k}": np.asarray(v) for k, v in o.hyper_states().items()})
        arrays["meta/optimizer"] = np.array(",".join(type(o).__name__
                                                     for o in self._optimizers()))
        for k, v in (aux_states or {}).items():
            arrays[f"aux/{k}"] = v.data if isinstance(v, Tensor) else np.asarray(v)
        d = os.path.dirname(os.path.abspath(fpath))
        fd, tmp = tempfile.mkstemp(prefix=".ckpt-", suffix=".zip", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, fpath)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def load_states(self, fpath: str) -> dict:
        """Restore a checkpoint written by :meth:`save_states`; returns its aux states (as
        Tensors, as SINGA).

        Raises :class:`CheckpointError` (and changes nothing) when names or shapes differ from
        this model's.
        """
        try:
            with np.load(fpath, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise CheckpointError(f"cannot read checkpoint {fpath!r}: {e}") from e
        mine = self._checkpoint_tensors()
        want = {k for k in mine if k.startswith("state/")}
        have = {k for k in data if k.startswith("state/")}
        problems = []
        if want - have:
            problems.append(f"missing in checkpoint: {sorted(want - have)}")
        if have - want:
            problems.append(f"not in model: {sorted(have - want)}")
        for k in want & have:
            if mine[k].shape != data[k].shape:
                problems.append(f"{k}: model has shape {mine[k].shape}, checkpoint "
                                f"{data[k].shape}")
        problems += self._check_optimizer_states(data)
        if problems:
            raise CheckpointError(f"checkpoint {fpath!r} does not match the model: "
                                  + "; ".join(problems))
        for k in want:
            np.copyto(mine[k].data, data[k])  # in place: compiled plans stay bound
        for o in self._optimizers():
            o.load_states({k[4:]: v for k, v in data.items() if k.startswith("opt/")},
                          {k[9:]: v for k, v in data.items() if k.startswith("opthyper/")})
        # SINGA returns the aux states as Tensors
        return {k[4:]: Tensor(data=v, requires_grad=False) for k, v in data.items()
                if k.startswith("aux/")}
