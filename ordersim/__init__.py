"""ordersim: a research simulator for example-ordering algorithms in (distributed) SGD."""

from pathlib import Path

from ordersim.numba_cache import register_tree

__version__ = "0.1.0"

# before any cached kernel of the package compiles or loads (ordersim/numba_cache.py)
register_tree(Path(__file__).parent)
