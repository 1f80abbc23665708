"""The tables that map ONNX ops to singa_graph ops and back.

Importers are keyed by ONNX op type and the opset version since which that form of the op
exists, as ``onnx/reference/ops`` names its classes (``Squeeze_1``, ``Squeeze_13``): a node
of a model at opset ``v`` is handled by the entry with the largest ``since`` not above the
version of the op's schema at ``v``. Supporting one more op is one decorated function::

    @importer("Relu")
    def relu(n, x):            # n: the node (attributes, constant inputs), x: a Tensor
        return ops.relu(x)

Exporters are keyed by our op type and write ONNX nodes through an export context.
"""
from __future__ import annotations

from typing import Callable

import onnx.defs

IMPORTERS: dict[str, dict[int, Callable]] = {}
EXPORTERS: dict[str, Callable] = {}


DEFAULT_DOMAINS = ("", "ai.onnx")


def _key(op_type: str, domain: str) -> str:
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def importer(op_type: str, since: int = 1, domain: str = ""):
    """Register ``fn(node, *inputs)`` as the import of ``op_type`` (of ``domain``, the
    default one unless given) from opset ``since`` on."""

    def deco(fn):
        IMPORTERS.setdefault(_key(op_type, domain), {})[since] = fn
        return fn

    return deco


def exporter(*our_types: str):
    """Register ``fn(ctx, node)`` as the export of our op types."""

    def deco(fn):
        for t in our_types:
            EXPORTERS[t] = fn
        return fn

    return deco


def schema_version(op_type: str, opset: int, domain: str = "") -> int | None:
    """The ``since_version`` of ``op_type``'s schema at ``opset``; None if ONNX has none."""
    try:
        return onnx.defs.get_schema(op_type, opset, domain).since_version
    except onnx.defs.SchemaError:
        return None


def find_importer(op_type: str, opset: int, domain: str = "") -> Callable | None:
    """The import function for ``op_type`` of ``domain`` in a model importing ``opset`` of
    that domain, or None."""
    table = IMPORTERS.get(_key(op_type, domain))
    if not table:
        return None
    version = schema_version(op_type, opset, "" if domain in DEFAULT_DOMAINS else domain) \
        or opset
    usable = [s for s in table if s <= version]
    return table[max(usable)] if usable else None


def supported_import_ops() -> list[str]:
    return sorted(IMPORTERS)
