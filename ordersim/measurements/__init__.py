"""Per-epoch measurements: plug-ins that each write one or a few per-epoch datasets of the trace.

A measurement is a subclass of ordersim.measurements.base.Measurement in its own module
(docs/adding.md, "A trace dataset"): the built-ins are the public modules of this package, an
installed package adds one through the entry-point group ``ordersim.measurements``, and a .py file
works by its path in ``--measurements``. The built-ins with ``default = True`` run in every run;
the others run where ``--measurements`` names them.
"""

from functools import cache

from ordersim.registry import Registry, package_classes


@cache  # the trace schema asks at every measured epoch: list the package's modules once
def builtin_measurements() -> tuple[type, ...]:
    from ordersim.measurements.base import Measurement

    return tuple(package_classes(__name__, __path__, Measurement))


def _base() -> type:
    from ordersim.measurements.base import Measurement

    return Measurement


MEASUREMENTS = Registry("measurement", "ordersim.measurements", builtin_measurements, _base)


def run_measurements(names) -> list[type]:
    """The measurement classes of a run: the default ones (in the registry's order), then those
    that `names` (the config's ``measurements``: names or .py paths) adds; ValueError for a name
    that is neither."""
    chosen = [cls for cls in MEASUREMENTS.values() if cls.default]
    for name in names:
        cls = MEASUREMENTS.get_class(name)
        if cls not in chosen:
            chosen.append(cls)
    return chosen


__all__ = ["MEASUREMENTS", "builtin_measurements", "run_measurements"]
