"""Writing dump files atomically, and finding the external programs some formats need."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from ..errors import ToolMissingError

GRAPHVIZ_ADVICE = ("install Graphviz (Debian/Ubuntu: `apt-get install graphviz`, macOS: "
                   "`brew install graphviz`, conda: `conda install graphviz`), or dump the "
                   "'dot', 'json' or 'html' format, which need no external program")
RSVG_ADVICE = ("install librsvg's converter (Debian/Ubuntu: `apt-get install librsvg2-bin`, "
               "macOS: `brew install librsvg`) or cairosvg (`pip install cairosvg`), or dump "
               "'memory.svg', which needs no external program")


def write_atomic(path: str, data: bytes | str) -> None:
    """Write ``path`` through a temporary file and a rename: a failed dump leaves no
    half-written file behind."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".dump-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a dump is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def graphviz(dot_text: str, fmt: str, dpi: int = 110) -> bytes:
    """Render DOT text with Graphviz's ``dot`` program into ``fmt`` ('svg' or 'png'; ``dpi``
    sets a PNG's resolution)."""
    exe = shutil.which("dot")
    if exe is None:
        raise ToolMissingError(f"dumping {fmt!r} needs Graphviz's `dot` program, which is not "
                               f"on PATH: {GRAPHVIZ_ADVICE}")
    args = [exe, f"-T{fmt}"] + ([f"-Gdpi={dpi}"] if fmt == "png" else [])
    r = subprocess.run(args, input=dot_text.encode("utf-8"), capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"dot -T{fmt} failed: {r.stderr.decode(errors='replace')[:2000]}")
    return r.stdout


def svg_to_png(svg_text: str, scale: float = 2.0) -> bytes:
    """Rasterise an SVG with ``rsvg-convert`` or, failing that, the cairosvg module."""
    exe = shutil.which("rsvg-convert")
    if exe is not None:
        r = subprocess.run([exe, "-f", "png", "-z", str(scale)], input=svg_text.encode(),
                           capture_output=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"rsvg-convert failed: {r.stderr.decode(errors='replace')}")
        return r.stdout
    try:
        import cairosvg
    except ImportError:
        raise ToolMissingError(f"dumping 'memory.png' needs an SVG rasteriser and none is "
                               f"installed: {RSVG_ADVICE}") from None
    return cairosvg.svg2png(bytestring=svg_text.encode(), scale=scale)
