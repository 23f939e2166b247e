"""`python -m ordersim orderers` and `python -m ordersim problems`: what is registered."""


def _print(entries: dict) -> int:
    width = max(map(len, entries))
    for name, description in entries.items():
        print(f"{name:<{width}}  {description}")
    return 0


def orderers(argv: list[str]) -> int:
    from ordersim.orderers import available_orderers

    return _print(available_orderers())


def problems(argv: list[str]) -> int:
    from ordersim.data import PACKAGE_SETS, SKLEARN_SETS
    from ordersim.problems import available_problems

    _print(available_problems())
    print("\ndata sets (--data SPEC; formats and options: docs/problems.md):")
    return _print({**{f"sklearn:{name}": "bundled with scikit-learn" for name in SKLEARN_SETS},
                   **{spec: f"{what} (pip install 'ordersim[datasets]')" for spec, (_, what) in PACKAGE_SETS.items()},
                   "synthetic:regression|classification?...": "generated from the seed",
                   "libsvm:PATH": "LIBSVM text, .gz too (data/w8a.gz and data/mushrooms.gz are in the repository)",
                   "csv:PATH, npz:PATH, hdf5:PATH": "your own files"})
