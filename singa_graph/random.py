"""One seeded generator for initialisers and dropout masks, so runs are reproducible."""
import numpy as np

_rng = np.random.default_rng(0)


def seed(s: int) -> None:
    """Reset the global generator used by parameter initialisers and Dropout."""
    global _rng
    _rng = np.random.default_rng(s)


def generator() -> np.random.Generator:
    return _rng
