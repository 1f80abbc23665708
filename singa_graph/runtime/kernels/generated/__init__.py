"""Modules of generated elementwise kernels (see :mod:`..generate`).

Their files live outside the package, in :func:`..generate.source_dir`; that folder is part
of this package's path so that any process can import a generated kernel by name (the PTX
check compiles recorded launches so)."""
from ..generate import source_dir

__path__.append(source_dir())  # noqa: F821 (a package's own __path__)
