"""Finite-sum problems, found by name (benchopt-style registry).

Every public module of this package defines one ``Problem`` subclass with a ``name``; adding a
problem is one file here, or a file anywhere passed by path (see docs/problems.md).

    from ordersim.problems import make_problem, available_problems
    p = make_problem("logistic", features=31, classes=2, lam=1e-3)
    p = make_problem("path/to/my_problem.py", features=31, classes=2)
"""

import hashlib
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
from pathlib import Path

from ordersim import numba_cache

numba_cache.register_tree(Path(__file__).parent)  # before the cached kernels: stamps them
from ordersim.problems.base import Problem  # noqa: E402

_registry: dict[str, type[Problem]] = {}


def _problem_classes(module) -> list[type[Problem]]:
    return [cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, Problem) and cls.__module__ == module.__name__ and cls.name]


def _discover() -> dict[str, type[Problem]]:
    if not _registry:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
            if info.name.startswith("_") or info.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            for cls in _problem_classes(module):
                if cls.name in _registry:
                    raise RuntimeError(f"two problems are named {cls.name!r}")
                _registry[cls.name] = cls
    return _registry


def available_problems() -> dict[str, str]:
    """Every problem's name and one-line description."""
    return {name: cls.description for name, cls in sorted(_discover().items())}


def _is_path(name_or_path: str) -> bool:
    return name_or_path.endswith(".py") or os.sep in name_or_path or "/" in name_or_path


def _load_file(path: str) -> type[Problem]:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"problem file {path!r} does not exist (a problem is a registered name or a path to a .py file)")
    # The same name in every process (Numba's cache refers to the module by it): a digest of the
    # absolute path, not hash(), which Python salts per process.
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:16]
    module_name = f"ordersim_user_problem_{re.sub(r'[^0-9A-Za-z_]', '_', file.stem)}_{digest}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ValueError(f"problem file {path!r} failed to import: {type(exc).__name__}: {exc}") from exc
    classes = _problem_classes(sys.modules[module_name])
    if len(classes) != 1:
        raise ValueError(f"problem file {path!r} must define exactly one subclass of ordersim.problems.base.Problem "
                         f"with a non-empty name, found {len(classes)}")
    return classes[0]


def problem_class(name_or_path: str) -> type[Problem]:
    """The class behind a registered name or a path to a problem file (its label_kind tells how to load data)."""
    if not isinstance(name_or_path, str):
        raise ValueError(f"a problem is a name or a path, got {name_or_path!r}")
    registry = _discover()
    if name_or_path in registry:
        return registry[name_or_path]
    if _is_path(name_or_path):
        return _load_file(name_or_path)
    raise ValueError(f"unknown problem {name_or_path!r}; known problems: {', '.join(sorted(registry))} "
                     f"(or a path to a .py file)")


def make_problem(name_or_path: str, features: int, classes: int = 0, **options) -> Problem:
    """A problem for data with ``features`` columns and ``classes`` classes (0 for regression)."""
    return problem_class(name_or_path)(features, classes, **options)


__all__ = ["Problem", "available_problems", "make_problem", "problem_class"]
