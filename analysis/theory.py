"""The theory's rate exponents (docs/algorithms.md, section "Theory"), in one place.

Rates up to log factors after T epochs with m workers of n examples each:

    method    smooth non-convex        PL / strongly convex
    rr        (mn)^{-1/3} T^{-2/3}     1/(mn T^2)          (D-RR for m > 1; RR for m = 1)
    grab      (nT)^{-2/3}              1/(nT)^2            (centralized, m = 1)
    cd-grab   (mnT)^{-2/3}             1/(mnT)^2

so the error at fixed T has slope -1 (rr) and -2 (cd-grab) against m on a log-log plot under PL.
``pair-grab`` is GraB with pair balance and has GraB's rate; cd-grab with m = 1 equals pair-grab.
Orderers the theory table does not cover (so, flipflop, wr, d-grab, d-grab-pair, greedy) have no
exponent here: the fit reports "n/a" for them rather than guessing.

The error is f(x_T) - f* under PL and the (minimum) squared gradient norm in the non-convex case.

Herding (prefix-sum discrepancy) of n centered vectors: Theta(sqrt n) for random orders,
O~(1) (polylog; we draw log n) for balanced orders.
"""

SETTINGS = ("pl", "nonconvex")
VARIABLES = ("m", "n", "T")

# EXPONENTS[setting][orderer][variable]: error ~ variable^exponent, the other variables fixed.
EXPONENTS = {
    "pl": {
        "rr": {"m": -1.0, "n": -1.0, "T": -2.0},
        "grab": {"n": -2.0, "T": -2.0},
        "pair-grab": {"n": -2.0, "T": -2.0},
        "cd-grab": {"m": -2.0, "n": -2.0, "T": -2.0},
    },
    "nonconvex": {
        "rr": {"m": -1 / 3, "n": -1 / 3, "T": -2 / 3},
        "grab": {"n": -2 / 3, "T": -2 / 3},
        "pair-grab": {"n": -2 / 3, "T": -2 / 3},
        "cd-grab": {"m": -2 / 3, "n": -2 / 3, "T": -2 / 3},
    },
}

# The rates as the papers state them, up to a constant C (and log factors) they do not give.
RATE_TEXT = {
    "pl": {"rr": r"$C/(mnT^2)$", "grab": r"$C/(nT)^2$", "pair-grab": r"$C/(nT)^2$",
           "cd-grab": r"$C/(mnT)^2$"},
    "nonconvex": {"rr": r"$C(mn)^{-1/3}T^{-2/3}$", "grab": r"$C(nT)^{-2/3}$",
                  "pair-grab": r"$C(nT)^{-2/3}$", "cd-grab": r"$C(mnT)^{-2/3}$"},
}

# Herding against n: random orders ~ sqrt(n); balanced orders ~ log n (O~(1) up to log factors).
HERDING_RANDOM = ("rr", "so", "flipflop", "wr")
HERDING_BALANCED = ("grab", "pair-grab", "d-grab", "d-grab-pair", "cd-grab", "greedy")


def exponent(orderer: str, variable: str, setting: str = "pl") -> float | None:
    """The theory's exponent of the error against ``variable`` ("m", "n" or "T"), or None if not covered."""
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {', '.join(SETTINGS)}, got {setting!r}")
    if variable not in VARIABLES:
        raise ValueError(f"variable must be one of {', '.join(VARIABLES)}, got {variable!r}")
    return EXPONENTS[setting].get(orderer, {}).get(variable)


def format_exponent(value: float | None) -> str:
    """-2 -> "-2", -2/3 -> "-2/3", None -> "n/a"."""
    if value is None:
        return "n/a"
    for den in (1, 3):
        num = round(value * den)
        if abs(num - value * den) < 1e-9:
            return f"{num}" if den == 1 else f"{num}/{den}"
    return f"{value:.3g}"


__all__ = ["EXPONENTS", "HERDING_BALANCED", "HERDING_RANDOM", "RATE_TEXT", "SETTINGS", "VARIABLES", "exponent",
           "format_exponent"]
