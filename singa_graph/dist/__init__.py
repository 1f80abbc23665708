"""Data-parallel training across processes and machines over MPI.

    mpiexec -n 4 python train.py                 # one machine
    mpiexec -f hosts -n 16 python train.py       # a host file, one host name per line

* :class:`DistOpt` wraps an optimizer (SINGA's ``opt.DistOpt``, also exported there).
* :func:`shard` and :func:`iterate_shard` give each rank its own part of a data set.
* :class:`DistError` is raised when a collective fails or times out.

See the README ("Training on many processes") for launching, checkpoints and the scaling
model.
"""
from .comm import Communicator, DistError  # noqa: F401
from .data import iterate_shard, shard  # noqa: F401
from .opt import DistOpt  # noqa: F401
