"""The `theory` step size of each orderer and the quantities the PL analyses' assumptions are stated in.

Under PL (μ > 0) with n steps per epoch and T epochs, the analyses of RR / D-RR and of GraB / CD-GraB
take a constant step size α of the form log(·)/(μ n T): the optimization ("bias") term of the bound
then decays as exp(−α μ n T), and the log's argument is chosen so that this term is as small as the
noise term, i.e. exp(−α μ n T) = the rate the theorem proves. ordersim takes that choice literally
(docs/simulator.md, "The theory schedule", says what the papers state and what could not be checked):

    orderer                        rate (PL)        α = ln(1 / rate) / (μ n T)
    cd-grab, grab, pair-grab       1 / (m n T)^2    2 ln(m n T) / (μ n T)
    every other orderer            1 / (m n T^2)    ln(m n T^2) / (μ n T)      (D-RR; RR for m = 1)

Both analyses also assume a small step: α ≤ 1 / (c L n) for a constant c ≥ 1 (every example's loss
L-smooth), which at this α means T ≳ κ log(·) with κ = L/μ. `regime` records those quantities; the
check it reports is the necessary part that holds for any such c: α L_max n ≤ 1 and T ≥ κ_max =
L_max / μ, in the analyses' setting: one example per worker per step (b = 1: n steps per epoch)
and plain SGD steps (no momentum). A run with b > 1 or momentum is outside it whatever its
numbers (they are still recorded, computed as for b = 1).
"""

import math

# Orderers whose PL guarantee is the coordinated / centralized GraB rate 1/(m n T)^2 (m = 1 for the
# centralized ones); every other orderer is held to what any permutation order guarantees, D-RR's.
BALANCED_RATE = ("cd-grab", "grab", "pair-grab")


def theory_rate(orderer: str, m: int, n: int, T: int) -> float:
    """The PL rate the orderer's analysis proves after T epochs, without its constant."""
    if orderer in BALANCED_RATE:
        return 1.0 / (m * n * T) ** 2
    return 1.0 / (m * n * T**2)


def theory_step(orderer: str, m: int, n: int, T: int, mu: float) -> float:
    """α = ln(1 / rate) / (μ n T): the constant step at which the bias term exp(−α μ n T) is the
    rate."""
    T = max(T, 2)
    return -math.log(theory_rate(orderer, m, n, T)) / (mu * n * T)


def regime(alpha: float, constants: dict, m: int, n: int, T: int, batch: int = 1,
           momentum: float = 0.0) -> dict:
    """The quantities the analyses' step-size and horizon assumptions are stated in, and the check.

    alpha_L_n uses L (the smoothness of the mean objective), alpha_Lmax_n L_max (of the worst
    example: the theorems assume every example's loss is L-smooth); kappa = L_max / mu. in_regime
    also needs the analyses' setting, b = 1 without momentum (the module's doc).
    """
    L, L_max, mu = (float(constants.get(k) or math.nan) for k in ("L", "L_max", "mu"))
    kappa = L_max / mu if mu > 0 else math.inf
    out = dict(alpha_L_n=alpha * L * n, alpha_Lmax_n=alpha * L_max * n, kappa=kappa,
               T_over_kappa=T / kappa)
    analysed = batch == 1 and momentum == 0
    out["in_regime"] = bool(analysed and out["alpha_Lmax_n"] <= 1.0 and out["T_over_kappa"] >= 1.0)
    if not analysed:
        out["outside_setting"] = f"b = {batch}, momentum {momentum:g}: the analyses take b = 1 without momentum"
    return out


def regime_warning(regimes: dict) -> str | None:
    """One line naming the orderers ({name: regime(...)}) whose runs leave the regime, or None."""
    outside = [f"{name} (" + (f"{info['outside_setting']}; " if "outside_setting" in info else "")
               + f"alpha L_max n = {info['alpha_Lmax_n']:.3g}, alpha L n = {info['alpha_L_n']:.3g}, "
               f"T/kappa = {info['T_over_kappa']:.3g})"
               for name, info in regimes.items() if info and not info["in_regime"]]
    if not outside:
        return None
    return ("ordersim: warning: outside the regime of the PL analyses (alpha L_max n <= 1 and "
            "T >= kappa = L_max/mu): " + "; ".join(outside))


def capped_warning(regimes: dict) -> str | None:
    """One line naming the orderers whose theory step lr capped, or None: their runs stay inside
    the assumptions (a smaller step) but not at the step whose bias term the rate is."""
    capped = {name: info for name, info in regimes.items()
              if info and info.get("theory_step", 0) > info["step_size"]}  # {}: no regime recorded
    if not capped:
        return None
    step = next(iter(capped.values()))["step_size"]
    return (f"ordersim: warning: lr = {step:.3g} caps the theory step of "
            + ", ".join(f"{name} ({info['theory_step']:.3g})" for name, info in capped.items())
            + ": their runs do not take the step the analyses' rate assumes (raise lr above it)")
