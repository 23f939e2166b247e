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
from ordersim.orderers.base import BALANCE_OPTIONS, Orderer, balance_options, default_walk_c
from ordersim.registry import Registry, package_classes

OPTIONS = ("first_worker", "sign", "walk_c", "tie", "first_order", "projection", "projection_dim", "group",
           "projected_input")


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
    projection_dim, group, projected_input (see Orderer), and
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


def table_options(classes: list[type[Orderer]], table: dict, batch: int | None,
                  field: str = "config field 'orderer_options'") -> list[dict]:
    """make_orderer's keyword arguments, for each of the orderer ``classes``, from the config's
    ``orderer_options`` table, which the run's orderers share: each takes its own
    ``extra_options`` and, if it reads the gradients, projection, projection_dim and group
    (balance_options; the orderers that ignore the gradients ignore them, as make_orderer does).
    A ValueError naming ``field`` refuses what make_orderer would refuse: an entry that none of
    the classes takes, a bad value of an orderer's own option (Orderer.check_options), a bad
    projection or group, projection or group for a gradient orderer that
    takes neither."""
    own = {key: cls.name for cls in classes for key in cls.extra_options}  # each option, an orderer taking it
    unknown = sorted(set(table) - set(BALANCE_OPTIONS) - set(own))
    if unknown:
        allowed = [*BALANCE_OPTIONS, *(f"{key} ({name})" for key, name in own.items())]
        raise ValueError(f"{field}: unknown option(s) {', '.join(map(str, unknown))} for the orderers "
                         f"{', '.join(cls.name for cls in classes)}; allowed: {', '.join(allowed)}")
    balance = balance_options(table, batch, field)
    options = []
    for cls in classes:
        given = {key: table[key] for key in cls.extra_options if key in table}
        try:
            cls.check_options(given)  # the rule __init__ applies, before any data is read
        except ValueError as err:
            raise ValueError(f"{field}: {err}") from None
        if cls.needs_gradients:
            try:
                cls.check_takes_projection_and_group(balance["projection"], balance["group"])
            except ValueError as err:
                raise ValueError(f"{field}: {err}") from None
            given.update(balance)
        options.append(given)
    return options


def build_orderer(name: str, workers: int, n: int, d: int, seed: int, *, ranks: int, first: int, local: int,
                  orderer_options: dict, batch: int | None, walk_c: float | None = None,
                  options_field: str = "config field 'orderer_options'", projected_input: bool = False,
                  **options) -> tuple:
    """(orderer, coordinated): orderer `name` as one of `ranks` processes holds it, whose workers
    are first..first+local-1 of m = `workers` (n examples each, gradients of d values). A
    coordinated orderer runs for all m workers on every process (coordinated is then True: it
    needs every worker's gradients); the others for the process's own workers.

    The orderer takes its entries of the `orderer_options` table (table_options: its own options,
    and projection, projection_dim and group if it reads the gradients; group must divide `batch`
    unless it is None); the table is shared by the run's orderers, so the entries that are other
    orderers' options are left to them (config.check_fields refuses those none of them takes).
    walk_c None is the default from N = m n, not from this process's workers, so the walk is the
    same on any number of processes. With `projected_input` (a caller that can form Pi g itself:
    the simulator for a linear model) a projecting orderer is handed Pi g instead of g. `options`
    go to make_orderer (sign, tie, first_order, run_epochs, the orderer's own)."""
    options["walk_c"] = default_walk_c(workers * n, d) if walk_c is None else walk_c
    cls = orderer_class(name)
    mine = {key: value for key, value in orderer_options.items() if key in BALANCE_OPTIONS + cls.extra_options}
    options.update(table_options([cls], mine, batch, options_field)[0])
    if cls.needs_gradients:
        options["projected_input"] = projected_input and options["projection"] != "none"
    coordinated = cls.coordinated and ranks > 1
    rows, first_row = (workers, 0) if coordinated else (local, first)
    return make_orderer(name, rows, n, d, seed, first_worker=first_row, **options), coordinated


__all__ = ["ORDERERS", "Orderer", "available_orderers", "build_orderer", "make_orderer", "orderer_class",
           "table_options"]
