"""Numba kernels shared by the balancing orderers: the sign choice and the two reorder loops.

Signs follow docs/algorithms.md ("Sign choice"): deterministic (eps = +1 iff <s,v> <= 0, or < 0 with
tie="minus") or the self-balancing walk (eps = +1 with probability 1/2 - <s,v>/(2c), clipped). The
pair walk has two more rules, for orderers of the ADAPTIVE_BALANCE layout: kernel halving
(kh-sgd, cd-kh), whose threshold adapts to the walk, and the self-balancing walk with c from the
differences' norms (sbw); both need <v, v> of every pair.

The state lives in one flat buffer (``_state.py``); a kernel call takes just (grads, state).

The epoch's balancing discrepancy, max over steps of ||s||_inf, is kept as ``peaks``: per
running-sum row, the largest ||s||_inf so far, which the vector update of s returns at no extra
pass over s (``_vector.py``).

With the options group or projection, the unit kernels (below) balance the units instead: a
group's mean gradient or a single gradient, projected by Pi (``_projection.py``).

The kernels record each sign (``signs``: 1 for +1, per example or per pair) and the next order is
built from them when the epoch ends (``place_by_signs``): placing every example as it came meant
reading the order and writing the next one in 24 interleaved streams (m = 8) inside the walk,
which cost cd-grab's serial epoch ~3 ms of ~60 (docs/performance.md).
"""

import numpy as np
from numba import njit

import math

from ordersim.orderers._projection import project
from ordersim.orderers._vector import (add_signed_difference, add_signed_difference_and_sum,
                                       add_signed_difference_and_sum_then_dot, add_signed_difference_then_dot,
                                       dot_with_difference, squared_norm_of_difference)
from ordersim.orderers._state import N, OBSERVED, StateLayout, f64, i64, observer, open_for, state_kernel, u8
from ordersim.orderers._units import (UNITS, UnitOrderer, add_to_group, close_group, group_size, group_sum,
                                     projection_of, unit_vectors)

SIGN_DETERMINISTIC = 0
SIGN_WALK = 1
SIGN_KERNEL_HALVING = 2  # ADAPTIVE_BALANCE's rules, of the adaptive pair kernels
SIGN_SCALED_WALK = 3

BALANCE = StateLayout(
    **UNITS.fields,  # grouped balancing and the projection (_units.py)
    # 1 for +1: row i's example at visit position t (mean balance) or its pair (t, t + 1) =
    # (2k, 2k + 1) at [i, k] (pair balance)
    signs=u8["m", "n"],
    walk_failures=i64["m"],
    # one row per worker, or one shared row (cd-grab); k wide under a projection, else d
    running_sum=f64["sum_rows", "balanced_dim"],
    peaks=f64["sum_rows"],  # per running-sum row, the largest ||s||_inf so far
    uniforms=f64["m", "n"],  # the walk's uniforms of the epoch, u[i, k] for row i's k-th decision
    # the orderer's own rows (DistributedGraB: k or d wide, DistributedPairGraB: d)
    extra=f64["extra_rows", "m", "extra_dim"],
    sign_mode=i64[()],  # SIGN_DETERMINISTIC or SIGN_WALK (or an ADAPTIVE_BALANCE mode)
    tie_plus=i64[()],  # 1: eps = +1 for <s, v> = 0
    walk_bound=f64[()],  # the walk's c
)
signs, walk_failures, running_sum = BALANCE.signs, BALANCE.walk_failures, BALANCE.running_sum
peaks, uniforms, extra = BALANCE.peaks, BALANCE.uniforms, BALANCE.extra
sign_mode, tie_plus, walk_bound = BALANCE.sign_mode, BALANCE.tie_plus, BALANCE.walk_bound

# BALANCE's fields first, in its order, so that BALANCE's accessors read them in these states
# too; then the state of the two adaptive pair rules (docs/algorithms.md, "kh-sgd", "sbw").
ADAPTIVE_BALANCE = StateLayout(
    **BALANCE.fields,
    sub_gaussian=f64["sum_rows"],  # kernel halving's sigma per running-sum row
    penalty_base=f64[()],  # kernel halving's P = (4 / delta)(ln E + 1)(1 + ln K)
    epoch_factor=f64[()],  # e + 1 in the penalty ln(P k (e + 1))
    walk_scale=f64[()],  # sbw: c = b_max * walk_scale
    difference_bound=f64[()],  # sbw: the given b_max, or 0 (from the differences)
    previous_largest=f64["sum_rows"],  # sbw: the largest ||v|| of the previous epoch
    largest_difference=f64["sum_rows"],  # sbw: the largest ||v|| of this epoch so far
)
sub_gaussian, penalty_base, epoch_factor = (ADAPTIVE_BALANCE.sub_gaussian, ADAPTIVE_BALANCE.penalty_base,
                                            ADAPTIVE_BALANCE.epoch_factor)
walk_scale, difference_bound = ADAPTIVE_BALANCE.walk_scale, ADAPTIVE_BALANCE.difference_bound
previous_largest, largest_difference = ADAPTIVE_BALANCE.previous_largest, ADAPTIVE_BALANCE.largest_difference


@njit(inline="always", error_model="numpy")
def choose_sign(i, dot, mode, tie_plus, walk_c, u, at, walk_failures):
    """Row i's sign for dot = <s, v>, the walk's uniform being u[at]; a walk step with |dot| > c
    counts as row i's failure."""
    if mode == SIGN_DETERMINISTIC:
        if dot < 0.0 or (dot == 0.0 and tie_plus):
            return 1.0
        return -1.0
    if abs(dot) > walk_c:
        walk_failures[i] += 1
    p = 0.5 - dot / (2.0 * walk_c)
    return 1.0 if u[at] < p else -1.0


@njit(inline="always", error_model="numpy")
def balance_rule(state):
    """The sign options of BALANCE (choose_sign's): mode, tie plus, the walk's c."""
    return sign_mode(state), tie_plus(state) != 0, walk_bound(state)


@njit(inline="always", error_model="numpy")
def balance_sign(rule, i, r, decision, k, dot, a, b, u, walk_failures):
    """choose_sign with BALANCE's options ``rule`` (balance_rule): the pair walk's sign rule of
    pair-grab, d-grab-pair and cd-grab; worker i's pair k, the walk's uniform u[k]."""
    mode, plus, walk_c = rule
    return choose_sign(i, dot, mode, plus, walk_c, u, k, walk_failures)


@njit(inline="always", error_model="numpy")
def adaptive_rule(state):
    """The state of ADAPTIVE_BALANCE's rules, taken once per kernel call before the walk: views
    taken by an inlined function after the vector code's intrinsics lost their stores (Numba
    0.6x), so the rule gets them as arguments."""
    return (sign_mode(state), sub_gaussian(state), penalty_base(state), epoch_factor(state), walk_scale(state),
            difference_bound(state), previous_largest(state), largest_difference(state))


@njit(error_model="numpy", _nrt=False)
def kernel_halving_sign(i, r, decision, k, dot, beta, sigma, base, factor, u, walk_failures):
    """adaptive_sign's kernel-halving rule, sigma[r] updated (docs/algorithms.md, "kh-sgd"). Not
    inlined: inlined after the vector code's intrinsics, its store to sigma was lost (Numba 0.68)."""
    if beta == 0.0:
        return 1.0
    penalty = math.log(base * decision * factor)
    ratio = sigma[r] * penalty / beta
    if ratio <= 1.0:
        threshold = beta
        sigma[r] = 2.0 * beta
    else:
        root = math.sqrt(ratio)
        threshold = root * beta
        growth = penalty + 0.5 - root
        if growth > 0.0:
            sigma[r] = sigma[r] + 2.0 * beta * growth / penalty
    if abs(dot) > threshold:
        walk_failures[i] += 1
    return 1.0 if dot <= (2.0 * u[k] - 1.0) * threshold else -1.0


@njit(inline="always", error_model="numpy")
def adaptive_sign(rule, i, r, decision, k, dot, a, b, u, walk_failures):
    """Worker i's sign for its pair k (v = a - b; b None: v = a) with dot = <s, v> against the
    running-sum row r, the row's decision-th decision of the epoch (1, 2, ...), u[k] its uniform,
    by an ADAPTIVE_BALANCE rule (adaptive_rule; docs/algorithms.md, "kh-sgd" and "sbw").
    Kernel halving (kernel_halving_sign): a threshold a from beta = <v, v>, the penalty and sigma, eps =
    +1 iff dot <= (2u - 1) a, a failure when |dot| > a; beta = 0 gives +1 and leaves sigma.
    Scaled walk: the walk's rule with c = b_max * walk_scale, b_max given or the largest ||v|| of
    the previous epoch (of this epoch so far, v included, if that was 0); c = 0 gives p = 1/2."""
    mode, sigma, base, factor, scale, given_bound, previous, largest = rule
    beta = squared_norm_of_difference(a, b)
    if mode == SIGN_KERNEL_HALVING:
        return kernel_halving_sign(i, r, decision, k, dot, beta, sigma, base, factor, u, walk_failures)
    largest[r] = max(largest[r], math.sqrt(beta))
    bound = given_bound
    if bound == 0.0:
        bound = previous[r] if previous[r] > 0.0 else largest[r]
    c = bound * scale
    if abs(dot) > c:
        walk_failures[i] += 1
    p = 0.5 - dot / (2.0 * c) if c > 0.0 else 0.5
    return 1.0 if u[k] < p else -1.0


@observer
def mean_balance_observe(grads, state, start):
    """GraB's mean balance, every row on its own: v = g - mean of the previous epoch's gradients.

    grads (m, b, d) holds visit positions start..start+b-1 of each row; the sign of row i's example
    at position t goes to signs[i, t] (place_by_signs: +1 examples fill the row of the next order
    from the left in arrival order, -1 examples from the right). extra[0] holds the previous
    epoch's means, extra[1] this epoch's sums, (m, d) each.
    Rows are independent, so they are walked one at a time and each row's state stays in cache for
    its b examples.
    """
    m, b = grads.shape[0], grads.shape[1]
    chosen, failures, s, peak = signs(state), walk_failures(state), running_sum(state), peaks(state)
    u, rows = uniforms(state), extra(state)
    mode, plus, walk_c = sign_mode(state), tie_plus(state) != 0, walk_bound(state)
    for i in range(m):
        row, mean_prev, grad_sum = s[i], rows[0, i], rows[1, i]
        dot = dot_with_difference(row, grads[i, 0], mean_prev)
        for j in range(b):
            g = grads[i, j]
            eps = choose_sign(i, dot, mode, plus, walk_c, u[i], start + j, failures)
            # the row's next example is balanced against the s this update makes: its dot
            # product is taken in the update's pass, on s still in registers
            if j + 1 < b:
                largest, dot = add_signed_difference_and_sum_then_dot(row, g, mean_prev, eps, grad_sum,
                                                                      grads[i, j + 1], mean_prev)
            else:
                largest = add_signed_difference_and_sum(row, g, mean_prev, eps, grad_sum)
            peak[i] = max(peak[i], largest)  # s_i's largest ||s||_inf so far
            chosen[i, start + j] = eps > 0.0


@njit(inline="always", error_model="numpy")
def gradient_pair(grads, pending, start, i, q):
    """(a, b) with a - b worker i's q-th pair completed in a call that observes the gradients of
    visit positions start..: its first gradient is in grads, or kept in pending (m, d) from the
    call before."""
    first = 2 * (start // 2 + q) - start
    if first < 0:
        return pending[i], grads[i, first + 1]
    return grads[i, first], grads[i, first + 1]


@njit(inline="always", error_model="numpy")
def difference_pair(differences, pending, start, i, q):
    """(v, None): worker i's q-th pair difference of a call that observes them."""
    return differences[i, q], None


@njit(inline="always", error_model="numpy")
def walk_pairs(vectors, state, pairs, pair_vectors, decide, rule):
    """PairBalance over `pairs` pairs of every worker, from the pair that visit position
    state[OBSERVED] completes or belongs to on: pair k is positions (2k, 2k+1), v = g_2k - g_2k+1,
    and pair_vectors(vectors, pending, start, i, q) gives worker i's q-th as (a, b), v = a - b
    (b None: v = a; gradient_pair, difference_pair).

    The running sum has one row per worker (independent, d-grab-pair) or a single shared row
    (cd-grab), and the pair's workers are visited in worker order inside every pair index, so with
    a shared row the walk is the coordinated one of CD-GraB. The sign of row i's pair k is
    decide(rule, i, r, decision, k, dot, a, b, u[i], walk_failures) (balance_sign, adaptive_sign),
    decision counting the row's decisions of the epoch from 1 (over all workers on a shared row);
    it goes to signs[i, k] (place_by_signs).
    """
    m, start = vectors.shape[0], state[OBSERVED]
    chosen, failures, s, peak = signs(state), walk_failures(state), running_sum(state), peaks(state)
    u, pending = uniforms(state), extra(state)[0]
    rows = s.shape[0]
    dot_ahead, dot = False, 0.0  # whether the last update already took this pair's <s, v>
    for q in range(pairs):
        k = start // 2 + q
        for i in range(m):
            r = 0 if rows == 1 else i
            row = s[r]
            a, b = pair_vectors(vectors, pending, start, i, q)
            if not dot_ahead:
                dot = dot_with_difference(row, a, b)
            eps = decide(rule, i, r, k * m + i + 1 if rows == 1 else k + 1, k, dot, a, b, u[i], failures)
            # With one shared row, the next pair of this call (the next worker's, or worker 0's
            # next one) is balanced against the s this update makes: its dot product is taken
            # in the update's pass, on s still in registers.
            dot_ahead = rows == 1 and (i + 1 < m or q + 1 < pairs)
            if dot_ahead:
                next_a, next_b = pair_vectors(vectors, pending, start, (i + 1) % m, q + (i + 1) // m)
                largest, dot = add_signed_difference_then_dot(row, a, b, eps, next_a, next_b)
            else:
                largest = add_signed_difference(row, a, b, eps)
            peak[r] = max(peak[r], largest)  # s_r's largest ||s||_inf so far
            chosen[i, k] = eps > 0.0


@njit(inline="always", error_model="numpy")
def walk_gradient_pairs(grads, state, start, decide, rule):
    """PairBalance (walk_pairs) on the gradients (m, b, d) of visit positions start..start+b-1:
    every pair the call completes. When a pair's first gradient is the last of a call, extra[0]
    (m, d) keeps a copy of it: the caller may overwrite its buffer before the partner arrives.
    With n odd the last example has no partner and takes the middle of the next order.
    """
    m, b, d = grads.shape
    walk_pairs(grads, state, (start + b) // 2 - start // 2, gradient_pair, decide, rule)
    last = start + b - 1
    if last % 2 == 0 and last < state[N] - 1:  # the partner comes in a later call: keep a copy
        pending = extra(state)[0]
        for i in range(m):
            for k in range(d):
                pending[i, k] = grads[i, b - 1, k]


@observer
def pair_balance_observe(grads, state, start):
    """walk_gradient_pairs with the sign options (pair-grab, d-grab-pair, cd-grab)."""
    walk_gradient_pairs(grads, state, start, balance_sign, balance_rule(state))


@observer
def adaptive_pair_observe(grads, state, start):
    """walk_gradient_pairs with an ADAPTIVE_BALANCE rule (kh-sgd, cd-kh, sbw)."""
    walk_gradient_pairs(grads, state, start, adaptive_sign, adaptive_rule(state))


@njit(inline="always", error_model="numpy")
def differences_fit(differences, state):
    """The differences (m, p, d) fit the open epoch: whole pairs from an even position (or none
    at the end of the rows), at most the examples left; walk_difference_pairs' check."""
    p, start, n = differences.shape[1], state[OBSERVED], state[N]
    return (open_for(differences, state) and (start % 2 == 0 or start == n)
            and (p >= 1 or start >= n - 1) and start + 2 * p <= n)


@njit(inline="always", error_model="numpy")
def count_differences(state, p):
    """Counts p pairs' two examples per row as observed, and with n odd the last example, which
    has no partner, once the call reaches it."""
    observed, n = state[OBSERVED] + 2 * p, state[N]
    state[OBSERVED] = n if observed == n - 1 else observed


@njit(inline="always", error_model="numpy")
def walk_difference_pairs(differences, state, decide, rule):
    """PairBalance (walk_pairs) on differences (m, p, d) already formed: v = g_2k - g_2k+1 of
    every worker's next p pairs (the serial backend forms them as the gradients come, so that the
    walk reads one vector per pair and the steps keep half as many rows; engine.epoch_loop).
    Calls take whole pairs; with n odd the call that reaches position n - 1 also counts the last
    example, which has no partner. A call without pairs is allowed at the end of the rows (it
    counts that example if n = 1, and does nothing once every example is counted). Returns p, or
    -1 if the differences do not fit (nothing is changed then): its own check, as it counts two
    examples per row for each vector (not ``observer``'s).
    """
    p = differences.shape[1]
    if not differences_fit(differences, state):
        return -1
    walk_pairs(differences, state, p, difference_pair, decide, rule)
    count_differences(state, p)
    return p


@state_kernel
def pair_difference_observe(differences, state):
    """walk_difference_pairs with the sign options (pair-grab, d-grab-pair, cd-grab)."""
    return walk_difference_pairs(differences, state, balance_sign, balance_rule(state))


@state_kernel
def adaptive_pair_difference_observe(differences, state):
    """walk_difference_pairs with an ADAPTIVE_BALANCE rule (kh-sgd, cd-kh, sbw)."""
    return walk_difference_pairs(differences, state, adaptive_sign, adaptive_rule(state))


# -- units: grouped balancing and the projection (docs/algorithms.md) ------------------------------
# With group = r > 1 or a projection, the balanced vectors are the units' (a group's mean
# gradient, or a single example's gradient), projected: mean balance signs P(unit) against its
# stale mean, the pair walk P(first unit - second unit), P = Pi or the identity. These kernels
# make that vector in unit_vectors and sign it with the same vector code and sign rules as the
# kernels above; the orderers without either option keep those.
@observer
def unit_mean_balance_observe(grads, state, start):
    """GraB's mean balance (mean_balance_observe) on units: the visit positions are cut into
    groups of r; when row i's group at unit position p completes, its vector P(mean) (r = 1:
    P(g)) is signed against the row's running sum as v = P(mean) - stale mean, the sign going
    to signs[i, p] and the walk using u[p]. extra[0] the previous epoch's mean unit vector,
    extra[1] this epoch's sum, (m, balanced_dim) each. Positions after the last whole group are
    no unit."""
    m, b = grads.shape[0], grads.shape[1]
    chosen, failures, s, peak = signs(state), walk_failures(state), running_sum(state), peaks(state)
    u, rows = uniforms(state), extra(state)
    mode, plus, walk_c = sign_mode(state), tie_plus(state) != 0, walk_bound(state)
    r, sums, vectors = group_size(state), group_sum(state), unit_vectors(state)
    kind, dense, columns, bounds, sigma = projection_of(state)
    end = state[N] // r * r
    for j in range(b):
        t = start + j
        if t >= end:
            break
        if r > 1 and t % r != r - 1:
            for i in range(m):
                add_to_group(sums[i], grads[i, j], t % r == 0)
            continue
        position = t // r
        for i in range(m):
            if r > 1:
                close_group(sums[i], grads[i, j], r)
                project(vectors[i], sums[i], None, kind, dense, columns, bounds, sigma)
            else:
                project(vectors[i], grads[i, j], None, kind, dense, columns, bounds, sigma)
            v, mean_prev = vectors[i], rows[0, i]
            dot = dot_with_difference(s[i], v, mean_prev)
            eps = choose_sign(i, dot, mode, plus, walk_c, u[i], position, failures)
            peak[i] = max(peak[i], add_signed_difference_and_sum(s[i], v, mean_prev, eps, rows[1, i]))
            chosen[i, position] = eps > 0.0


@njit(inline="always", error_model="numpy")
def sign_unit_pairs(k, vectors, s, decide, rule, u, failures, peak, chosen):
    """Every row's k-th pair, its vector in vectors[i], signed against its running sum (or the
    shared one, rows in worker order) by decide (walk_pairs' rule)."""
    m, rows = vectors.shape[0], s.shape[0]
    for i in range(m):
        r = 0 if rows == 1 else i
        row, v = s[r], vectors[i]
        dot = dot_with_difference(row, v, None)
        eps = decide(rule, i, r, k * m + i + 1 if rows == 1 else k + 1, k, dot, v, None, u[i],
                     failures)
        peak[r] = max(peak[r], add_signed_difference(row, v, None, eps))
        chosen[i, k] = eps > 0.0


@njit(inline="always", error_model="numpy")
def walk_unit_pairs(grads, state, start, decide, rule):
    """PairBalance (walk_pairs) on units: units 2k and 2k + 1 of a row (groups of r positions, or
    single examples) are its pair k, v = P(first - second) (the difference of the two units'
    means, or gradients, formed coordinate by coordinate, then projected). extra[0] keeps the
    first unit (d) until its partner completes: a group's mean, or a gradient that is the last
    of a call. The unpaired last unit and the positions after the last whole group are no pair."""
    m, b = grads.shape[0], grads.shape[1]
    chosen, failures, s, peak = signs(state), walk_failures(state), running_sum(state), peaks(state)
    u, pending = uniforms(state), extra(state)[0]
    r, sums, vectors = group_size(state), group_sum(state), unit_vectors(state)
    kind, dense, columns, bounds, sigma = projection_of(state)
    end = state[N] // r // 2 * 2 * r
    for j in range(b):
        t = start + j
        if t >= end:
            break
        position = t // r
        opens_pair = position % 2 == 0
        if r > 1:
            # a pair's first group is summed (and made its mean) in pending, its second in sums
            for i in range(m):
                total = pending[i] if opens_pair else sums[i]
                if t % r != r - 1:
                    add_to_group(total, grads[i, j], t % r == 0)
                else:
                    close_group(total, grads[i, j], r)
                    if not opens_pair:
                        project(vectors[i], pending[i], sums[i], kind, dense, columns, bounds, sigma)
            if t % r != r - 1:
                continue
        else:
            for i in range(m):
                if opens_pair:
                    if j == b - 1:  # the partner comes in a later call: keep a copy
                        for c in range(pending.shape[1]):
                            pending[i, c] = grads[i, j, c]
                elif j == 0:
                    project(vectors[i], pending[i], grads[i, j], kind, dense, columns, bounds, sigma)
                else:
                    project(vectors[i], grads[i, j - 1], grads[i, j], kind, dense, columns, bounds, sigma)
        if not opens_pair:
            sign_unit_pairs(position // 2, vectors, s, decide, rule, u, failures, peak, chosen)


@observer
def unit_pair_balance_observe(grads, state, start):
    """walk_unit_pairs with the sign options (pair-grab, d-grab-pair, cd-grab)."""
    walk_unit_pairs(grads, state, start, balance_sign, balance_rule(state))


@observer
def unit_adaptive_pair_observe(grads, state, start):
    """walk_unit_pairs with an ADAPTIVE_BALANCE rule (kh-sgd, cd-kh, sbw)."""
    walk_unit_pairs(grads, state, start, adaptive_sign, adaptive_rule(state))


@njit(inline="always", error_model="numpy")
def walk_projected_differences(differences, state, decide, rule):
    """walk_difference_pairs (differences_fit, count_differences) with every difference projected first:
    v = P(g_2k - g_2k+1), the same numbers as walk_unit_pairs' for r = 1."""
    p, start = differences.shape[1], state[OBSERVED]
    if not differences_fit(differences, state):
        return -1
    chosen, failures, s, peak = signs(state), walk_failures(state), running_sum(state), peaks(state)
    u, vectors = uniforms(state), unit_vectors(state)
    kind, dense, columns, bounds, sigma = projection_of(state)
    for q in range(p):
        for i in range(differences.shape[0]):
            project(vectors[i], differences[i, q], None, kind, dense, columns, bounds, sigma)
        sign_unit_pairs(start // 2 + q, vectors, s, decide, rule, u, failures, peak, chosen)
    count_differences(state, p)
    return p


@state_kernel
def projected_pair_difference_observe(differences, state):
    """walk_projected_differences with the sign options (pair-grab, d-grab-pair, cd-grab)."""
    return walk_projected_differences(differences, state, balance_sign, balance_rule(state))


@state_kernel
def projected_adaptive_pair_difference_observe(differences, state):
    """walk_projected_differences with an ADAPTIVE_BALANCE rule (kh-sgd, cd-kh, sbw)."""
    return walk_projected_differences(differences, state, adaptive_sign, adaptive_rule(state))


@njit(cache=True, error_model="numpy")
def place_by_signs(order, signs, pairs, next_order):
    """The next order (m, n) from the epoch's order and its signs: row by row, +1 examples from
    the left in arrival order and -1 examples from the right, so in reverse arrival order (the
    two-pointer reorder of docs/algorithms.md, "Reorder"). With ``pairs`` signs[i, k] is pair k's,
    (order[i, 2k], order[i, 2k + 1]): the example it sends left takes place k, the other place
    n - 1 - k, and with n odd the last example, unpaired, takes the middle one."""
    m, n = order.shape
    for i in range(m):
        if pairs:
            for k in range(n // 2):
                earlier, later = order[i, 2 * k], order[i, 2 * k + 1]
                to_left = earlier if signs[i, k] else later
                next_order[i, k] = to_left
                next_order[i, n - 1 - k] = earlier + later - to_left
            if n % 2:
                next_order[i, n // 2] = order[i, n - 1]
        else:
            left, right = 0, n - 1
            for t in range(n):
                if signs[i, t]:
                    next_order[i, left] = order[i, t]
                    left += 1
                else:
                    next_order[i, right] = order[i, t]
                    right -= 1


class BalancingOrderer(UnitOrderer):
    """The balancing orderers' state (BALANCE) and epoch: subclasses set ``kernel`` (one of the
    kernels above), ``extra_rows``, the rows of their (extra_rows, m, ·) ``extra`` field, and
    ``pair_walk`` for the pair walks. With the options projection or group the orderer balances
    units (the unit kernels above; docs/algorithms.md, "Random projection before balancing",
    "Grouped balancing")."""

    state_layout = BALANCE
    extra_rows = 1
    pair_walk = False
    # the kernels of units: (gradients, pair differences) of the sign options and of an
    # ADAPTIVE_BALANCE rule
    unit_kernels = (unit_mean_balance_observe, None)

    @property
    def sum_rows(self) -> int:
        """Rows of the running sum: one shared by all workers when coordinated, else one each."""
        return 1 if self.coordinated else self.workers

    @property
    def units_per_sum(self) -> int:
        """A shared running sum balances every worker's units."""
        return self.units * self.workers // self.sum_rows

    @property
    def extra_dim(self) -> int:
        """extra's width: a pair walk keeps a pending first gradient (d), mean balance its means."""
        return self.dim if self.pair_walk else self.balanced_dim

    def _setup_state(self):
        self.sign_mode[...] = SIGN_WALK if self.sign == "walk" else SIGN_DETERMINISTIC
        self.tie_plus[...] = self.tie == "plus"
        self.walk_bound[...] = self.walk_c
        super()._setup_state()

    def _begin(self):
        self.running_sum[:] = 0.0
        self.peaks[:] = 0.0
        self.walk_failures[:] = 0
        if self.sign == "walk":
            self.uniforms[...] = self.walk_uniforms()

    def _next_order(self) -> np.ndarray:
        if not self.balances_units:
            next_order = np.empty_like(self.epoch_order)
            place_by_signs(self.epoch_order, self.signs, self.pair_walk, next_order)
            return next_order
        # the units' next positions by their signs, then every unit's r examples in their order
        positions = np.ascontiguousarray(np.broadcast_to(np.arange(self.units, dtype=np.int64),
                                                         (self.workers, self.units)))
        placed = np.empty_like(positions)
        place_by_signs(positions, np.ascontiguousarray(self.signs[:, :self.units]), self.pair_walk, placed)
        return self.expand_units(placed)

    @property
    def balance_discrepancy(self) -> float:
        """max_k ||s_k||_inf over the epoch so far (the largest over independent rows)."""
        return float(self.peaks.max())


class AdaptivePairWalk:
    """Mixin, before a pair orderer's class (DistributedPairGraB or a subclass): its walk with an
    ADAPTIVE_BALANCE rule instead of the sign options, which then have no effect. Subclasses set
    the rule's mode and constants in _setup_state; the walk's uniforms are drawn every epoch."""

    state_layout = ADAPTIVE_BALANCE
    kernel = staticmethod(adaptive_pair_observe)
    pair_difference_kernel = staticmethod(adaptive_pair_difference_observe)
    unit_kernels = (unit_adaptive_pair_observe, projected_adaptive_pair_difference_observe)
    own_sign_rule = True

    def _begin(self):
        super()._begin()
        self.uniforms[...] = self.walk_uniforms()
