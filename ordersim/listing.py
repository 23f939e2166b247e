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
    from ordersim.problems import available_problems

    return _print(available_problems())
