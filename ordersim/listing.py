"""`python -m ordersim orderers`, `problems` and `measurements`: what is registered (the
registries of ordersim.registry: built-ins, installed packages' entry points)."""


def _parse(command: str, argv: list[str]) -> None:
    """--help, and a one-line error (exit 2) for any other argument: a listing takes none."""
    from ordersim.cli import COMMANDS
    from ordersim.config import OneLineParser

    OneLineParser(prog=f"python -m ordersim {command}", description=COMMANDS[command][2]).parse_args(argv)


def _print(entries: dict) -> int:
    width = max(map(len, entries))
    for name, description in entries.items():
        print(f"{name:<{width}}  {description}")
    return 0


def orderers(argv: list[str]) -> int:
    _parse("orderers", argv)
    from ordersim.orderers import ORDERERS

    return _print(ORDERERS.descriptions())


def problems(argv: list[str]) -> int:
    _parse("problems", argv)
    from ordersim.data import DATA_SOURCES
    from ordersim.problems import PROBLEMS

    _print(PROBLEMS.descriptions())
    print("\ndata sets (--data SPEC; formats and options: docs/problems.md):")
    return _print({spec: description for cls in DATA_SOURCES.values() for spec, description in cls().examples().items()})


def measurements(argv: list[str]) -> int:
    _parse("measurements", argv)
    from ordersim.measurements import MEASUREMENTS

    _print({name: f"{cls.description} [{', '.join(dataset.name for dataset in cls.datasets)}]"
                  f"{'' if cls.default else ' (only where --measurements names it)'}"
            for name, cls in MEASUREMENTS.items()})
    print("\nthe trace's other per-epoch datasets (losses, gradient norm, herding, timers) come from "
          "the run itself: docs/trace-format.md")
    return 0
