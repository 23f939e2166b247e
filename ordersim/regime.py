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
L-smooth), which at this α means T ≳ κ log(·) with κ = L/μ. The analyses of smooth non-convex
problems (RR's in arXiv 2006.05988, GraB's, CD-GraB's) take a step of the same order, 1/(L n), and
no horizon (docs/simulator.md says what could be checked). `regime` records those
quantities; the check it reports is the necessary part that holds for any such c: α L_max n ≤ 1,
and under PL T ≥ κ_max = L_max / μ, in the analyses' setting: one example per worker per step
(b = 1: n steps per epoch), plain SGD steps (no momentum) and a constant step. A run with b > 1,
momentum or a decaying schedule is outside it whatever its numbers (they are still recorded,
computed as for b = 1 and, for a decaying schedule, at its largest step).
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


# The schedules whose step is the same every epoch, as the analyses' is.
CONSTANT_SCHEDULES = ("constant", "theory")

# What each kind of analysis assumes, in the quantities `regime` records.
CONDITIONS = {"PL": "alpha L_max n <= 1 and T >= kappa = L_max/mu", "smooth non-convex": "alpha L_max n <= 1"}


def regime(alpha: float, constants: dict, m: int, n: int, T: int, batch: int = 1,
           momentum: float = 0.0, schedule: str = "constant") -> dict:
    """The quantities the analyses' step-size and horizon assumptions are stated in, and the check.

    alpha is the run's step (a decaying schedule's largest). alpha_L_n uses L (the smoothness of the
    mean objective), alpha_Lmax_n L_max (of the worst example: the theorems assume every example's
    loss is L-smooth). With mu > 0 the PL analyses apply, and kappa = L_max / mu and T_over_kappa
    are recorded; otherwise the smooth non-convex ones, which state no horizon. in_regime also
    needs the analyses' setting, b = 1 without momentum at a constant step (the module's doc).
    """
    L, L_max, mu = (float(constants.get(k) or math.nan) for k in ("L", "L_max", "mu"))
    pl = mu > 0
    out = dict(analyses="PL" if pl else "smooth non-convex", alpha_L_n=alpha * L * n,
               alpha_Lmax_n=alpha * L_max * n)
    inside = out["alpha_Lmax_n"] <= 1.0
    if pl:
        out.update(kappa=L_max / mu, T_over_kappa=T * mu / L_max)
        inside = inside and out["T_over_kappa"] >= 1.0
    outside_setting = []
    if batch != 1:
        outside_setting.append(f"b = {batch}: the analyses take b = 1")
    if momentum != 0:
        outside_setting.append(f"momentum {momentum:g}: the analyses take none")
    if schedule not in CONSTANT_SCHEDULES:
        outside_setting.append(f"schedule {schedule}: the analyses take a constant step (the numbers are "
                               "at its largest)")
    out["in_regime"] = bool(inside and not outside_setting)
    if outside_setting:
        out["outside_setting"] = "; ".join(outside_setting)
    return out


def numbers(info: dict, kappa: bool = False) -> str:
    """The regime's numbers of one run, as the warnings (and, with kappa, the dry run) print them."""
    return (f"alpha L_max n = {info['alpha_Lmax_n']:.3g}, alpha L n = {info['alpha_L_n']:.3g}"
            + (f", kappa = {info['kappa']:.3g}" if kappa and "kappa" in info else "")
            + (f", T/kappa = {info['T_over_kappa']:.3g}" if "T_over_kappa" in info else ""))


def grouped(texts: dict) -> str:
    """{name: text} as "a, b (text); c (other text)": names with the same text once, in order."""
    groups: dict[str, list[str]] = {}
    for name, text in texts.items():
        groups.setdefault(text, []).append(name)
    return "; ".join(f"{', '.join(names)} ({text})" for text, names in groups.items())


def regime_warning(regimes: dict) -> str | None:
    """One line naming the orderers ({name: regime(...)}) whose runs leave the regime, or None;
    orderers with the same numbers share them."""
    outside = {name: info for name, info in regimes.items() if info and not info["in_regime"]}
    if not outside:
        return None
    analyses = sorted({info["analyses"] for info in outside.values()})  # one kind: one problem a job
    return (f"ordersim: warning: outside the regime of the {' and '.join(analyses)} analyses ("
            + "; ".join(CONDITIONS[kind] for kind in analyses) + "): "
            + grouped({name: (f"{info['outside_setting']}; " if "outside_setting" in info else "")
                       + numbers(info) for name, info in outside.items()}))


def capped_warning(regimes: dict) -> str | None:
    """One line naming the orderers whose theory step lr capped, or None: their runs take a smaller
    step than the one whose bias term is the rate. Raising lr brings a run to the analysed step,
    but into the analyses' regime only where that step is in it: α L_max n = κ ln(1/ρ) / T at the
    theory step, so it needs T ≥ κ ln(1/ρ); the line says which."""
    capped = {name: info for name, info in regimes.items()
              if "theory_step" in info and info["theory_step"] > info["step_size"]}
    if not capped:
        return None
    step = next(iter(capped.values()))["step_size"]
    # at the theory step: alpha L_max n scales with the step; T / kappa does not change
    at_it = {name: info["alpha_Lmax_n"] * info["theory_step"] / info["step_size"] for name, info in capped.items()}
    outside = [name for name, info in capped.items() if at_it[name] > 1 or info["T_over_kappa"] < 1
               or "outside_setting" in info]
    line = (f"ordersim: warning: lr = {step:.3g} caps the theory step of "
            + grouped({name: f"{info['theory_step']:.3g}; alpha L_max n = {at_it[name]:.3g} at it"
                       for name, info in capped.items()})
            + ": their runs do not take the step the analyses' rate assumes")
    if not outside:
        return line + " (raise lr above it)"
    line += f", and a larger lr would not bring {', '.join(outside)} into the analyses' regime"
    short = [name for name in outside if at_it[name] > 1 or capped[name]["T_over_kappa"] < 1]
    if not short:  # only their setting (b > 1, momentum) keeps them out
        return line + f": {capped[outside[0]]['outside_setting']}"
    # alpha L_max n = kappa ln(1/rate) / T at the theory step: <= 1 needs T >= kappa ln(1/rate)
    horizon = max(at_it[name] * capped[name]["T_over_kappa"] * capped[name]["kappa"] for name in short)
    return (line + f": at the theory step alpha L_max n = kappa ln(1/rate) / T, which needs "
            f"T >= ~{horizon:.2g} epochs")
