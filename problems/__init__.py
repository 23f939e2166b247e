"""Finite-sum problems, found by name (benchopt-style registry).

Every public module of this package defines one ``Problem`` subclass with a ``name``; adding a
problem is one file here, a file anywhere passed by path, or a class another package registers in
the ``ordersim.problems`` entry-point group (ordersim.registry; docs/problems.md, docs/adding.md).

    from ordersim.problems import make_problem, available_problems
    p = make_problem("logistic", features=31, classes=2, lam=1e-3)
    p = make_problem("path/to/my_problem.py", features=31, classes=2)
"""

import warnings
from pathlib import Path

import ordersim
from ordersim import numba_cache
from ordersim.registry import Registry, package_classes

# An editable install maps this package to the problems/ of the checkout it was installed from,
# whichever ordersim PYTHONPATH puts first: a second checkout's ordersim would run with the first
# one's problems, edits to its own silently unused.
_beside = Path(ordersim.__file__).resolve().parent.parent / "problems"
if (_beside / "__init__.py").is_file() and _beside != Path(__file__).resolve().parent:
    warnings.warn(f"ordersim.problems is {Path(__file__).resolve().parent}, not {_beside} beside the ordersim "
                  f"in use ({Path(ordersim.__file__).resolve().parent}): an editable install maps ordersim."
                  f"problems to the checkout it was installed from; install this one (pip install -e "
                  f"{_beside.parent}) to run its problems", stacklevel=2)

numba_cache.register_tree(Path(__file__).parent)  # stamps the cached kernels the modules below define
from ordersim.problems.base import Problem  # noqa: E402


def _builtin_problems() -> list[type[Problem]]:
    """Every public module's problems, by name."""
    return package_classes(__name__, __path__, Problem)


PROBLEMS = Registry("problem", "ordersim.problems", _builtin_problems, lambda: Problem)


def available_problems() -> dict[str, str]:
    """Every problem's name and one-line description."""
    return PROBLEMS.descriptions()


def problem_class(name_or_path: str) -> type[Problem]:
    """The class behind a registered name or a path to a problem file (its label_kind tells how to load data)."""
    return PROBLEMS.get_class(name_or_path)


def make_problem(name_or_path: str, features: int, classes: int = 0, **options) -> Problem:
    """A problem for data with ``features`` columns and ``classes`` classes (0 for regression)."""
    return problem_class(name_or_path)(features, classes, **options)


__all__ = ["PROBLEMS", "Problem", "available_problems", "make_problem", "problem_class"]
