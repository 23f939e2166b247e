"""`python -m ordersim [COMMAND] ...`: dispatch to the subcommands."""

import sys

COMMANDS = {
    "herding-sim": ("ordersim.herding_sim", "the CD-GraB paper's random-vector parallel-herding experiment"),
}


def usage() -> str:
    lines = ["usage: python -m ordersim [COMMAND] [OPTIONS]", "", "commands:"]
    lines += [f"  {name:<14} {summary}" for name, (_, summary) in COMMANDS.items()]
    lines.append("\n`python -m ordersim COMMAND --help` explains a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if argv[0] not in COMMANDS:
        print(f"ordersim: unknown command {argv[0]!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = __import__(COMMANDS[argv[0]][0], fromlist=["main"])
    return module.main(argv[1:])
