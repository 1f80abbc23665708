"""Kernel tables, one subpackage per device kind; importing one registers its kernels.

Numba's on-disk cache (``cache=True``) checks a compiled kernel against its own source file
only, so after an upgrade in place a kernel whose *callee* changed (a formula, the
vectorised exp, a shared loop) would load stale machine code. Importing this package
therefore compares a digest of the kernels' sources with the one stamped beside their
caches, and drops the caches (``*.nbi``, ``*.nbc``) of a different version first.
"""
import hashlib
import pathlib

_ROOT = pathlib.Path(__file__).parent
_STAMP = "singa_graph_sources"


def sources_digest() -> str:
    """A digest of every kernel source, of the formulas the kernels are generated from and
    of the vector registers they are sized for (their width is a constant in the code)."""
    from ... import host

    files = sorted(_ROOT.rglob("*.py")) + [_ROOT.parent.parent / "ops" / "formulas.py"]
    h = hashlib.sha256(f"{host.vector_bytes()} {host.vector_registers()}".encode())
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:20]


def drop_stale_caches(folders, digest: str) -> list:
    """Delete the Numba cache files in ``folders`` unless their stamp says ``digest``, then
    stamp them; returns the folders cleared. Folders that cannot be written are skipped
    (Numba then caches elsewhere or not at all)."""
    cleared = []
    for d in map(pathlib.Path, folders):
        stamp = d / _STAMP
        try:
            if stamp.is_file() and stamp.read_text() == digest:
                continue
            if d.is_dir():
                for f in list(d.glob("*.nbi")) + list(d.glob("*.nbc")):
                    f.unlink(missing_ok=True)
                cleared.append(d)
            d.mkdir(parents=True, exist_ok=True)
            stamp.write_text(digest)
        except OSError:
            continue
    return cleared


def _cache_folders() -> list:
    """Where Numba caches the kernels: each source folder's ``__pycache__``, or its folder
    under ``NUMBA_CACHE_DIR`` where that is set."""
    from numba.core import config
    from numba.core.caching import UserProvidedCacheLocator

    from .generate import source_dir

    sources = [_ROOT, _ROOT / "cpu", _ROOT / "cuda"]
    try:
        sources.append(pathlib.Path(source_dir()))
    except OSError:  # no writable folder for generated kernels: nothing cached there
        pass
    if config.CACHE_DIR:
        return [pathlib.Path(config.CACHE_DIR) / UserProvidedCacheLocator
                .get_suitable_cache_subpath(str(p / "kernel.py")) for p in sources]
    return [p / "__pycache__" for p in sources]


drop_stale_caches(_cache_folders(), sources_digest())
