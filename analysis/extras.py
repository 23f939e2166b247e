"""The optional extras (pyproject.toml) that the analysis imports, and what a command says when one
is not installed: one line and exit status 2, not a traceback,

    python -m ordersim.analysis.convergence: error: convergence needs matplotlib, from the analysis extra: pip install 'ordersim[analysis]'

(the wording of ``python -m ordersim merge``). Imports the standard library only.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

# extra -> the packages of it that ordersim imports (pyproject.toml's [project.optional-dependencies])
EXTRAS = {"analysis": ("matplotlib", "pandas"), "xarray": ("pandas", "xarray")}


class MissingExtra(ModuleNotFoundError):
    """A package of an optional extra is not installed; the message names it and the pip command
    that installs the extra."""


def require(what: str, extra: str, packages=None) -> None:
    """Import ``packages`` (default: every package of ``extra``); a MissingExtra for the first that
    is missing: "WHAT needs PACKAGE, from the EXTRA extra: pip install 'ordersim[EXTRA]'"."""
    for package in packages or EXTRAS[extra]:
        try:
            importlib.import_module(package)
        except ImportError as missing:
            raise MissingExtra(f"{what} needs {package}, from the {extra} extra: pip install 'ordersim[{extra}]'",
                               name=package) from missing


def require_or_exit(prog: str, what: str, extra: str, packages=None) -> None:
    """``require`` for a command: a missing package is one line on stderr, "PROG: error: WHAT needs
    ...", and exit status 2."""
    try:
        require(what, extra, packages)
    except MissingExtra as missing:
        print(f"{prog}: error: {missing}", file=sys.stderr)
        raise SystemExit(2) from None


def script_requires(module_name: str, extra: str = "analysis") -> None:
    """The first statement of a ``python -m ordersim.analysis.NAME`` script, before it imports the
    packages of ``extra``: run as the command (``module_name`` is "__main__"), ``require_or_exit``
    with the command's name; imported, ``require`` (a MissingExtra naming the module)."""
    if module_name != "__main__":
        require(module_name, extra)
        return
    spec = sys.modules["__main__"].__spec__  # None when run as a file rather than with -m
    if spec:
        require_or_exit(f"python -m {spec.name}", spec.name.rpartition(".")[2], extra)
    else:
        require_or_exit(sys.argv[0], Path(sys.argv[0]).stem, extra)
