"""How many of ONNX's CPU backend node tests pass through ``sonnx.SingaBackend`` with no
exclusion list at all, and why the others fail, grouped so the biggest gaps show first.

    python bench/onnx_node_coverage.py              # counts and failure groups
    python bench/onnx_node_coverage.py -k resize    # only cases whose name holds "resize"
    python bench/onnx_node_coverage.py -v           # also every failing case with its reason
    python bench/onnx_node_coverage.py --strict     # exit 1 if a failure is not an
                                                    # UnsupportedOpError/DTypeError

Each failure is grouped by the op types of its model and by the reason (the exception type
and its message with numbers and names blanked), and labelled with the dtypes of its inputs.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
import unittest
import warnings
from collections import Counter, defaultdict

import numpy as np
import onnx
import onnx.backend.test
from onnx import helper

from singa_graph.errors import DTypeError, UnsupportedOpError
from singa_graph.onnx.backend import SingaBackend

_models: dict[str, onnx.ModelProto] = {}


class _Recording(SingaBackend):
    """Remembers the model each case prepares, to label its failure with op types/dtypes."""

    current = None

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        _models[cls.current] = model
        return super().prepare(model, device, **kwargs)


def _ops_and_dtypes(model) -> tuple[str, str]:
    if model is None:
        return "?", "?"
    ops = sorted({n.op_type for n in model.graph.node})
    inits = {i.name for i in model.graph.initializer}
    dts = sorted({helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name
                  if i.type.HasField("tensor_type") and i.type.tensor_type.elem_type else "other"
                  for i in model.graph.input if i.name not in inits} | set())
    return "+".join(ops), ",".join(dts)


def _reason(err: BaseException) -> str:
    msg = str(err).strip().splitlines()[0] if str(err).strip() else ""
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\(node [^)]*\)", "(node …)", msg)
    msg = re.sub(r"\d+(\.\d+)?", "#", msg)
    return f"{type(err).__name__}: {msg[:160]}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("-v", action="store_true", help="list every failing case")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 if a failure is not UnsupportedOpError or DTypeError")
    args = ap.parse_args(argv)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bt = onnx.backend.test.BackendTest(_Recording, __name__)
    cls = bt.test_cases["OnnxBackendNodeModelTest"]
    names = sorted(n for n in vars(cls) if n.startswith("test_") and n.endswith("_cpu")
                   and args.k in n)
    passed, failures = 0, {}
    t0 = time.perf_counter()
    for name in names:
        _Recording.current = name
        case = cls(name)
        result = unittest.TestResult()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.seterr(all="ignore")
            case.run(result)
        if result.wasSuccessful() and not result.skipped:
            passed += 1
            continue
        err = None
        for _, tb in result.errors + result.failures:
            err = tb
        if result.skipped:
            failures[name] = ("SkipTest: " + result.skipped[0][1], None)
            continue
        # the traceback's last line is "ExcType: message"
        last = [ln for ln in err.strip().splitlines() if ln and not ln.startswith(" ")][-1]
        typ, _, msg = last.partition(": ")
        typ = typ.rsplit(".", 1)[-1]
        failures[name] = (typ, msg)
    elapsed = time.perf_counter() - t0

    by_reason: Counter = Counter()
    by_op: Counter = Counter()
    by_dtype: Counter = Counter()
    examples: dict = defaultdict(list)
    bad = []
    for name, (typ, msg) in failures.items():
        ops, dts = _ops_and_dtypes(_models.get(name))
        fake = type(typ, (Exception,), {})(msg or "")
        reason = _reason(fake)
        by_reason[reason] += 1
        by_op[ops] += 1
        by_dtype[dts] += 1
        examples[reason].append(name)
        if typ not in (UnsupportedOpError.__name__, DTypeError.__name__):
            bad.append(name)

    print(f"{passed} of {len(names)} CPU node tests pass ({len(failures)} fail) in "
          f"{elapsed:.0f} s")
    print(f"\nfailures not UnsupportedOpError/DTypeError: {len(bad)}")
    print("\nby reason:")
    for reason, k in by_reason.most_common():
        print(f"{k:5d}  {reason}    e.g. {examples[reason][0]}")
    print("\nby op types of the model:")
    for ops, k in by_op.most_common(60):
        print(f"{k:5d}  {ops[:150]}")
    print("\nby input dtypes:")
    for d, k in by_dtype.most_common():
        print(f"{k:5d}  {d}")
    if args.v:
        print("\nfailing cases:")
        for name, (typ, msg) in sorted(failures.items()):
            print(f"{name}: {typ}: {(msg or '')[:200]}")
    return 1 if args.strict and bad else 0


if __name__ == "__main__":
    sys.exit(main())
