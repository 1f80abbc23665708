"""``singa-graph info MODEL --budget`` and ``singa-graph fit MODEL --budget``."""
from __future__ import annotations

import re

from singa_graph import cli


def test_info_with_a_budget_reports_it(capsys):
    assert cli.main(["info", "resnet", "--batch-size", "8", "--budget", "90%"]) == 0
    out = capsys.readouterr().out
    budget = float(re.search(r"budget\s+([0-9.]+) MiB", out).group(1))
    arena = float(re.search(r"\n  arena\s+([0-9.]+) MiB", out).group(1))
    before = float(re.search(r"arena without budget\s+([0-9.]+) MiB", out).group(1))
    assert arena <= budget < before
    assert int(re.search(r"recomputed nodes\s+(\d+)", out).group(1)) > 0


def test_info_below_the_minimum_says_so(capsys):
    assert cli.main(["info", "resnet", "--batch-size", "8", "--budget", "1KiB"]) == 1
    assert "smallest arena" in capsys.readouterr().err


def test_fit_finds_the_largest_batch(capsys):
    assert cli.main(["fit", "mlp", "--budget", "2MiB", "--max-batch-size", "512"]) == 0
    out = capsys.readouterr().out
    b = int(re.search(r"within 2.000 MiB: (\d+)", out).group(1))
    assert 1 <= b <= 512
    assert "predicted step time" in out
    p = cli.compiled_plan("mlp", b, "memory", budget="2MiB")
    assert p.memory.arena_bytes <= 2 << 20
    if b < 512:  # one more sample does not fit
        try:
            cli.compiled_plan("mlp", b + 1, "memory", budget="2MiB")
        except Exception as e:
            assert type(e).__name__ == "MemoryBudgetError"
        else:
            raise AssertionError(f"batch {b + 1} fits too")
    assert cli.main(["fit", "mlp", "--budget", "50%"]) == 2
