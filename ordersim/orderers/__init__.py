"""Example orderers, found by name.

Every public module in this package defines one ``Orderer`` subclass with a ``name``; adding an
orderer is one file here plus its NumPy reference in ``tests/reference/orderers.py`` and its
section in docs/algorithms.md (the spec both are written from). Another package adds one through
the ``ordersim.orderers`` entry-point group, a user through a path to a .py file (ordersim.registry;
docs/adding.md).

    from ordersim.orderers import make_orderer, available_orderers
    o = make_orderer("cd-grab", workers=4, examples=100, dim=10, seed=0)
"""


from ordersim import numba_cache  # noqa: F401  (stamps the cached kernels the modules below define)
from ordersim.orderers.base import Orderer
from ordersim.registry import Registry, package_classes

OPTIONS = ("first_worker", "sign", "walk_c", "tie", "first_order", "projection", "projection_dim", "group")


def _builtin_orderers() -> list[type[Orderer]]:
    """Every public module's orderers, by name."""
    return package_classes(__name__, __path__, Orderer)


ORDERERS = Registry("orderer", "ordersim.orderers", _builtin_orderers, lambda: Orderer)


def available_orderers() -> dict[str, str]:
    """Every orderer's name and one-line description."""
    return ORDERERS.descriptions()


def orderer_class(name: str) -> type[Orderer]:
    """The class of a registered orderer or of the one a .py file at that path defines."""
    return ORDERERS.get_class(name)


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


__all__ = ["ORDERERS", "Orderer", "available_orderers", "make_orderer", "orderer_class"]
