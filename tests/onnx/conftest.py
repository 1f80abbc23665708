"""Prints how many of ONNX's CPU node tests passed when tests/onnx/test_backend.py ran."""


def pytest_terminal_summary(terminalreporter):
    counts = {}
    for outcome in ("passed", "skipped", "failed", "error"):
        for rep in terminalreporter.stats.get(outcome, []):
            if "OnnxBackendNodeModelTest" in getattr(rep, "nodeid", "") and \
                    getattr(rep, "when", "call") in ("call", "setup"):
                counts[outcome] = counts.get(outcome, 0) + 1
    total = sum(counts.values())
    if total:
        terminalreporter.write_line(
            f"ONNX CPU node tests: {counts.get('passed', 0)} of {total} pass "
            f"({counts.get('skipped', 0)} skipped as unsupported or excluded, "
            f"{counts.get('failed', 0) + counts.get('error', 0)} fail)")
