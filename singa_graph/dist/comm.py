"""The MPI process group of data-parallel training, with deadlines on every collective.

Processes are started by ``mpiexec`` (MPICH's Hydra, from the ``mpich`` wheel, or any MPI
that mpi4py was built for). :class:`Communicator` wraps ``MPI.COMM_WORLD``: ranks, the
non-blocking collectives the all-reduce kernels start, and :meth:`Communicator.wait`, which
polls a request until it completes or its deadline passes.

Failure model. MPI has no notion of a dead peer: a collective whose peer was killed simply
never completes. Hydra's ``mpiexec`` kills every process of a job once one of them dies, but
other launchers, ``mpiexec -disable-auto-cleanup``, a lost host or a peer that hangs leave the
survivors waiting. So every wait here has a deadline (``timeout`` seconds, 300 by default,
``SINGA_GRAPH_DIST_TIMEOUT`` in the environment); peers on the same host are also checked by
process id while waiting, which finds a dead local peer within a fraction of a second. On
either, :class:`DistError` is raised naming the rank, the collective and the cause. An
unhandled exception on any rank (this one included) then aborts the whole job with
``MPI_Abort`` instead of leaving the other ranks in a collective forever, as ``python -m
mpi4py`` does.
"""
from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time

from ..errors import SingaGraphError
from ..runtime import threads

DEFAULT_TIMEOUT = 300.0
#: seconds a wait polls with sched_yield before it sleeps between polls
_SPIN_S = 5e-3
_POLL_PEERS = 0.25  # seconds between liveness checks of same-host peers
_FORWARD_OUTPUT = 0.2  # seconds for mpiexec to forward our last words before MPI_Abort


class DistError(SingaGraphError, RuntimeError):
    """A collective failed or did not complete in time (a peer died, hung or diverged)."""


def mpi():
    """The ``mpi4py.MPI`` module (importing it initialises MPI)."""
    try:
        from mpi4py import MPI
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("distributed training needs mpi4py and an MPI library: "
                          "pip install 'singa_graph[dist]' (mpi4py with the mpich wheel)") from e
    return MPI


def default_timeout() -> float:
    v = os.environ.get("SINGA_GRAPH_DIST_TIMEOUT")
    return float(v) if v else DEFAULT_TIMEOUT


class Communicator:
    """Ranks and deadline-guarded collectives over an MPI communicator.

    Args:
        comm: an mpi4py communicator; ``MPI.COMM_WORLD`` by default. It is duplicated, so
            the collectives of different communicators never interfere.
        timeout: seconds a collective may take before :class:`DistError`; see the module
            docstring. It must exceed the longest time one rank can run ahead of another
            (e.g. the first step's compilation, or rank 0 writing a checkpoint).
        progress: seconds between progress calls of a helper thread while non-blocking
            collectives are in flight (None: no thread). MPICH advances a collective only
            inside MPI calls, so without it an all-reduce started during the backward makes
            no progress until its wait; the thread calls ``Iprobe`` on a private
            communicator, which drives MPI's progress engine without touching the requests.

    Attributes:
        world_size: number of processes.
        global_rank: this process's rank in ``comm``.
        local_rank: its rank among the processes on the same host.
        local_size: the processes of ``comm`` on this host (MPI's shared-memory split).
        num_threads: the threads this process's kernels run on: its share of the host's
            cores, ``cores // local_size``, unless the user set a count (see
            :func:`singa_graph.set_num_threads`).
    """

    def __init__(self, comm=None, timeout: float | None = None,
                 progress: float | None = 5e-4):
        MPI = mpi()
        self.MPI = MPI
        # a private copy: collectives of two models (in two threads) never match each other
        self.comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self.timeout = float(default_timeout() if timeout is None else timeout)
        if not self.timeout > 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout!r}")
        self.world_size = self.comm.Get_size()
        self.global_rank = self.comm.Get_rank()
        local = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.global_rank)
        self.local_rank = local.Get_rank()
        self.local_size = local.Get_size()
        peers = local.allgather((self.global_rank, socket.gethostname(), os.getpid()))
        local.Free()
        # ranks on one host split its cores: each runs its kernels on its share of them
        self.num_threads = threads.share_host(self.local_size)
        me = socket.gethostname()
        self._local_peers = [(r, pid) for r, host, pid in peers
                             if host == me and r != self.global_rank]
        self._pending: list = []  # started requests, tested by later starts for progress
        self.failed: str | None = None
        self.stats = {"bytes": 0, "wait_s": 0.0}  # all-reduced bytes, seconds blocked
        self._busy = threading.Event()  # set while requests are in flight
        self._progress = None
        if (progress is not None and self.world_size > 1
                and MPI.Query_thread() == MPI.THREAD_MULTIPLE):
            self._progress = _ProgressThread(self.comm.Dup(), self._busy, float(progress))
        if self.world_size > 1:
            _install_abort_hooks(self)

    # ------------------------------------------------------------------ collectives
    def iallreduce(self, buf):
        """Start an in-place sum all-reduce of the contiguous array ``buf``."""
        req = self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)
        self._pending.append(req)
        self._busy.set()
        return req

    def progress(self) -> None:
        """Let MPI advance the started collectives (MPICH progresses only inside MPI calls)."""
        if self._pending:
            self.MPI.Request.Testall(self._pending)

    def wait(self, req, what: str) -> None:
        """Complete ``req`` or raise :class:`DistError` at the deadline or when a same-host
        peer process has died. ``what`` names the collective in the message."""
        try:
            if not req.Test():
                self._poll(req, what)
        except self.MPI.Exception as e:
            self._fail(f"{what} failed: {e}")
        finally:
            try:
                self._pending.remove(req)
            except ValueError:
                pass
            if not self._pending:
                self._busy.clear()

    def _poll(self, req, what: str) -> None:
        start = time.monotonic()
        deadline = start + self.timeout
        next_check = start + _POLL_PEERS
        spin_until = start + _SPIN_S
        nap = 2e-5
        while not req.Test():
            now = time.monotonic()
            if now >= next_check:
                dead = self._dead_peers()
                if dead:
                    self._fail(f"{what}: peer rank(s) {dead} on this host died "
                               f"(after {now - start:.1f} s)")
                next_check = now + _POLL_PEERS
            if now >= deadline:
                self._fail(f"{what} did not complete within the {self.timeout:g} s timeout: "
                           "a peer process has died, hangs or runs a different step")
            if now < spin_until:
                # a collective is a chain of handshakes, each waiting for the peer's next
                # MPI call: yielding (not sleeping) lets a peer that shares this core run,
                # and returns at once when none does, so each handshake costs microseconds
                os.sched_yield()
            else:  # a long wait (a peer compiling or writing a checkpoint): stop burning
                time.sleep(nap)
                nap = min(nap * 2, 1e-3)

    def _dead_peers(self) -> list[int]:
        dead = []
        for r, pid in self._local_peers:
            try:
                os.kill(pid, 0)
                with open(f"/proc/{pid}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
                if state in (b"Z", b"X"):
                    dead.append(r)
            except ProcessLookupError:
                dead.append(r)
            except OSError:  # no /proc or no permission: rely on the deadline
                pass
        return dead

    def _fail(self, msg: str):
        self.failed = f"rank {self.global_rank}/{self.world_size}: {msg}"
        raise DistError(self.failed)

    def channel(self, name: str) -> "Channel":
        """A new :class:`Channel`: the start/wait request of one bucket's all-reduce."""
        return Channel(self, name)

    def broadcast(self, arrays, root: int = 0, what: str = "broadcast") -> None:
        """Overwrite every array with ``root``'s, in order (all ranks pass the same list)."""
        for a in arrays:
            self.wait(self.comm.Ibcast(a, root=root), what)

    def barrier(self, what: str = "barrier") -> None:
        self.wait(self.comm.Ibarrier(), what)

    def allgather(self, sendbuf, recvbuf, what: str = "allgather") -> None:
        self.wait(self.comm.Iallgather(sendbuf, recvbuf), what)

    def allgatherv(self, sendbuf, recvbuf, counts, what: str = "allgatherv") -> None:
        self.wait(self.comm.Iallgatherv(sendbuf, [recvbuf, counts]), what)

    def allreduce(self, buf, what: str = "allreduce") -> None:
        self.wait(self.iallreduce(buf), what)

    def abort(self, code: int = 1) -> None:
        """Stop every process of the job (``MPI_Abort``)."""
        self.failed = None  # the exit hook has nothing left to do
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(_FORWARD_OUTPUT)
        self.MPI.COMM_WORLD.Abort(code)

    def __repr__(self):
        return (f"Communicator(rank {self.global_rank} of {self.world_size}, local rank "
                f"{self.local_rank}, timeout {self.timeout:g} s)")


class _ProgressThread(threading.Thread):
    """Calls ``Iprobe`` every ``interval`` seconds while ``busy`` is set (see Communicator's
    ``progress``). It stops at exit, before MPI is finalised."""

    def __init__(self, probe_comm, busy: threading.Event, interval: float):
        super().__init__(name="singa_graph-mpi-progress", daemon=True)
        self.probe_comm, self.busy, self.interval = probe_comm, busy, interval
        self.closed = False
        atexit.register(self.close)
        self.start()

    def run(self):
        while True:
            self.busy.wait()
            if self.closed:
                return
            self.probe_comm.Iprobe()
            time.sleep(self.interval)

    def close(self):
        self.closed = True
        self.busy.set()
        self.join(1.0)


def _install_abort_hooks(comm: Communicator) -> None:
    """Abort the job on an unhandled exception, or at exit after a failed collective.

    MPI's finalisation at exit would wait for the peers forever; the process state is
    process-wide, so these hooks are installed once per process."""
    if getattr(sys.excepthook, "_singa_graph_dist", False):
        return
    previous = sys.excepthook

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.write(f"singa_graph.dist: unhandled {kind.__name__} on rank "
                         f"{comm.global_rank}; aborting all {comm.world_size} processes\n")
        comm.abort(1)

    hook._singa_graph_dist = True
    sys.excepthook = hook

    def at_exit():
        if comm.failed:
            sys.stderr.write(f"singa_graph.dist: {comm.failed}; aborting the job\n")
            comm.abort(1)

    atexit.register(at_exit)


class Channel:
    """The request of one bucket's all-reduce, shared by its start and wait kernels.

    Also counts what the bench reports: seconds spent blocked in :meth:`wait` (the
    communication the backward did not hide) and bytes all-reduced."""

    def __init__(self, comm: Communicator, name: str):
        self.comm = comm
        self.name = name
        self._req = None

    def start(self, buf) -> None:
        if self._req is not None:  # a step that failed between start and wait
            self.comm.wait(self._req, f"all-reduce of {self.name} (left over)")
        self.comm.progress()
        self._req = self.comm.iallreduce(buf)
        self.comm.stats["bytes"] += buf.nbytes

    def wait(self) -> None:
        req, self._req = self._req, None
        if req is None:
            raise DistError(f"all-reduce of {self.name} waited on before it started")
        t0 = time.perf_counter()
        self.comm.wait(req, f"all-reduce of {self.name}")
        self.comm.stats["wait_s"] += time.perf_counter() - t0
