"""Example orderers, found by name.

Every public module in this package defines one ``Orderer`` subclass with a ``name``; adding an
orderer is one file here plus its NumPy reference in ``tests/reference/orderers.py`` and its
section in docs/algorithms.md (the spec both are written from).

    from ordersim.orderers import make_orderer, available_orderers
    o = make_orderer("cd-grab", workers=4, examples=100, dim=10, seed=0)
"""

import importlib
import inspect
import pkgutil

from ordersim import numba_cache  # noqa: F401  (before the cached kernels: stamps them)
from ordersim.orderers.base import Orderer

OPTIONS = ("first_worker", "sign", "walk_c", "tie", "first_order", "projection", "projection_dim", "group")

_registry: dict[str, type[Orderer]] = {}


def _discover() -> dict[str, type[Orderer]]:
    if not _registry:
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
            if info.name.startswith("_") or info.name == "base":
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Orderer) and cls.__module__ == module.__name__ and cls.name:
                    if cls.name in _registry:
                        raise RuntimeError(f"two orderers are named {cls.name!r}")
                    _registry[cls.name] = cls
    return _registry


def available_orderers() -> dict[str, str]:
    """Every orderer's name and one-line description."""
    return {name: cls.description for name, cls in sorted(_discover().items())}


def orderer_class(name: str) -> type[Orderer]:
    registry = _discover()
    if name not in registry:
        raise ValueError(f"unknown orderer {name!r}; known orderers: {', '.join(sorted(registry))}")
    return registry[name]


def make_orderer(name: str, workers: int, examples: int, dim: int, seed: int = 0, *,
                 run_epochs: int | None = None, **options) -> Orderer:
    """A fresh orderer; options: first_worker, sign, walk_c, tie, first_order, projection,
    projection_dim, group (see Orderer), and
    the orderer's own ``extra_options`` (sbw's epochs, ...). ``run_epochs``, the run's number of
    epochs, is passed as ``epochs`` to the orderers whose rule needs it and ignored by the others,
    so a caller running every orderer need not know which do."""
    cls = orderer_class(name)
    allowed = OPTIONS + cls.extra_options
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"{name}: unknown option(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    if run_epochs is not None and "epochs" in cls.extra_options:
        options.setdefault("epochs", run_epochs)
    return cls(workers, examples, dim, seed, **options)


__all__ = ["Orderer", "available_orderers", "make_orderer", "orderer_class"]
