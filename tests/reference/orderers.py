"""Plain-NumPy reference implementations of every orderer, written from docs/algorithms.md
("Random streams", "First epoch", "Sign choice", "Reorder", "Orderers"), not from the Numba
kernels. Slow and simple on purpose: the conformance suite in tests/test_orderers.py compares
every registered orderer with its entry in ``REFERENCES``.

Every reference has the signature

    reference(m, n, d, seed, grads_per_epoch, *, first_worker=0, sign="deterministic",
              walk_c=None, tie="plus", first_order="random", stats=None) -> list[np.ndarray]

and the balancing ones (``with_units``) also take projection, projection_dim and group
(docs/algorithms.md, "Random projection before balancing", "Grouped balancing").

``grads_per_epoch[e]`` is a float64 array (m, n, d) indexed by LOCAL EXAMPLE ID: the gradient of
worker i's example j in epoch e is ``grads_per_epoch[e][i, j]``, whatever the order (the orderers
that ignore gradients only use ``len(grads_per_epoch)`` and accept ``None`` entries). The result
holds len(grads_per_epoch) + 1 int64 (m, n) arrays: the order of every epoch, and last the order
that the epoch after the last one would use. If ``stats`` is a list, the balancing references
append one dict per epoch: ``walk_failures`` (int array (m,)) and ``discrepancy`` (max_k
||s_k||_inf over the epoch, the largest over independent running sums).

Floating point: running sums are accumulated in visit order (s += eps * v), GraB's stale mean is
the sum of the epoch's gradients accumulated example by example in visit order, then divided by n,
and <s, v> is summed in sixteen lanes (``lane_dot``), so the references take the same
sign decisions as any implementation that does the same, exact ties included.
"""

import functools
import math

import numpy as np

from ordersim.streams import stream

WALK_DELTA = 0.01  # the project's delta in the walk's default c = 30 log(N d / delta)


# -- the pieces of the spec ---------------------------------------------------------------------------
def first_orders(m, n, seed, first_worker, first_order):
    """First epoch: a random permutation per worker (stream "order", epoch 0) or the identity."""
    if first_order == "identity":
        return np.tile(np.arange(n, dtype=np.int64), (m, 1))
    return np.stack([stream(seed, "order", first_worker + i, 0).permutation(n) for i in range(m)]).astype(np.int64)


def default_walk_c(total_examples, d):
    return 30.0 * math.log(total_examples * d / WALK_DELTA)


def lane_dot(s, v):
    """<s, v> as the kernels sum it (ordersim/orderers/_vector.py): lane l adds the terms k = l, l + 16,
    l + 32, ... of the first 16 * (d // 16) in order; the lanes are added as
    v_l = (lane_l + lane_{4+l}) + (lane_{8+l} + lane_{12+l}), then (v_0 + v_1) + (v_2 + v_3); the
    last d mod 16 terms are added one at a time."""
    terms = s * v
    whole = len(terms) // 16 * 16
    lanes = [sum(terms[lane:whole:16], 0.0) for lane in range(16)]
    vectors = [(lanes[i] + lanes[4 + i]) + (lanes[8 + i] + lanes[12 + i]) for i in range(4)]
    return sum(terms[whole:], (vectors[0] + vectors[1]) + (vectors[2] + vectors[3]))


class SignRule:
    """Sign choice: deterministic (eps = +1 iff <s,v> <= 0, or < 0 with tie="minus") or the
    self-balancing walk (eps = +1 with probability 1/2 - <s,v>/(2c), clipped), whose uniforms for
    row i in epoch e are stream(seed, "walk", first_worker + i, e).random(n), the k-th decision of
    the row in the epoch using the k-th uniform."""

    def __init__(self, m, n, d, seed, first_worker, sign, walk_c, tie):
        if sign not in ("deterministic", "walk") or tie not in ("plus", "minus"):
            raise ValueError(f"bad sign {sign!r} or tie {tie!r}")
        self.m, self.n, self.seed, self.first_worker = m, n, seed, first_worker
        self.sign, self.tie = sign, tie
        self.c = default_walk_c(m * n, d) if walk_c is None else float(walk_c)
        self.failures = np.zeros(m, dtype=np.int64)

    def start_epoch(self, epoch):
        self.failures = np.zeros(self.m, dtype=np.int64)
        if self.sign == "walk":
            self.u = [stream(self.seed, "walk", self.first_worker + i, epoch).random(self.n) for i in range(self.m)]

    def __call__(self, s, v, row, k):
        """The sign of v against the running sum s: the k-th decision of ``row`` in this epoch."""
        dot = float(lane_dot(s, v))
        if self.sign == "deterministic":
            if self.tie == "plus":
                return 1 if dot <= 0.0 else -1
            return 1 if dot < 0.0 else -1
        if abs(dot) > self.c:
            self.failures[row] += 1
        probability = 0.5 - dot / (2.0 * self.c)  # clipping to [0, 1] changes nothing for u in [0, 1)
        return 1 if self.u[row][k] < probability else -1


def herding_reorder(visit_order, signs):
    """Reorder: the +1 examples in arrival order, then the -1 examples in reverse arrival order,
    written with the two pointers of the spec (+1 to slot left, -1 to slot right)."""
    n = len(visit_order)
    new = np.full(n, -1, dtype=np.int64)
    left, right = 0, n - 1
    for example, eps in zip(visit_order, signs):
        if eps > 0:
            new[left] = example
            left += 1
        else:
            new[right] = example
            right -= 1
    return new


def herding(vectors, order, norm=np.inf):
    """max_k || sum_{t<=k} (z_{order(t)} - mean z) || in the given norm (np.inf or 2)."""
    z = np.asarray(vectors, dtype=np.float64)
    z = z - z.mean(axis=0)
    prefix = np.cumsum(z[np.asarray(order)], axis=0)
    return float(np.max(np.linalg.norm(prefix, ord=norm, axis=1)))


def _options(first_worker=0, sign="deterministic", walk_c=None, tie="plus", first_order="random"):
    return dict(first_worker=first_worker, sign=sign, walk_c=walk_c, tie=tie, first_order=first_order)


# -- orderers that ignore gradients -----------------------------------------------------------------
def rr(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """Random reshuffling: epoch e >= 1 uses stream(seed, "order", worker, e).permutation(n)."""
    o = _options(**options)
    orders = [first_orders(m, n, seed, o["first_worker"], o["first_order"])]
    for epoch in range(1, len(grads_per_epoch) + 1):
        orders.append(np.stack([stream(seed, "order", o["first_worker"] + i, epoch).permutation(n)
                                for i in range(m)]).astype(np.int64))
    return orders


def so(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """Shuffle once: the first order, every epoch."""
    o = _options(**options)
    first = first_orders(m, n, seed, o["first_worker"], o["first_order"])
    return [first.copy() for _ in range(len(grads_per_epoch) + 1)]


def ig(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """Incremental gradient: the identity, every epoch, whatever first_order says."""
    return [np.tile(np.arange(n, dtype=np.int64), (m, 1)) for _ in range(len(grads_per_epoch) + 1)]


def flipflop(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """A new random permutation (the rr stream) on even epochs, the previous order reversed on odd."""
    o = _options(**options)
    orders = [first_orders(m, n, seed, o["first_worker"], o["first_order"])]
    for epoch in range(1, len(grads_per_epoch) + 1):
        if epoch % 2 == 1:
            orders.append(orders[-1][:, ::-1].copy())
        else:
            orders.append(rr(m, n, d, seed, [None] * epoch, **options)[epoch])
    return orders


def wr(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """With replacement: epoch e draws stream(seed, "order", worker, e).integers(0, n, n)
    (epoch 0 too, unless first_order="identity")."""
    o = _options(**options)
    orders = []
    for epoch in range(len(grads_per_epoch) + 1):
        if epoch == 0 and o["first_order"] == "identity":
            orders.append(first_orders(m, n, seed, 0, "identity"))
            continue
        orders.append(np.stack([stream(seed, "order", o["first_worker"] + i, epoch).integers(0, n, n)
                                for i in range(m)]).astype(np.int64))
    return orders


# -- GraB's mean balance ------------------------------------------------------------------------------
def d_grab(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """ID-GraB (Bal): every worker on its own balances v = g - (mean of its previous epoch's raw
    gradients; zero in the first epoch) against its own running sum, then the herding reorder."""
    o = _options(**options)
    rule = SignRule(m, n, d, seed, o["first_worker"], o["sign"], o["walk_c"], o["tie"])
    orders = [first_orders(m, n, seed, o["first_worker"], o["first_order"])]
    stale_mean = np.zeros((m, d))
    for epoch, grads in enumerate(grads_per_epoch):
        rule.start_epoch(epoch)
        order = orders[-1]
        new = np.empty((m, n), dtype=np.int64)
        peak = 0.0
        for i in range(m):
            s = np.zeros(d)
            grad_sum = np.zeros(d)
            signs = []
            for t in range(n):
                g = grads[i, order[i, t]]
                v = g - stale_mean[i]
                eps = rule(s, v, i, t)
                s += eps * v
                grad_sum += g
                peak = max(peak, float(np.max(np.abs(s))))
                signs.append(eps)
            new[i] = herding_reorder(order[i], signs)
            stale_mean[i] = grad_sum / n
        orders.append(new)
        if stats is not None:
            stats.append({"walk_failures": rule.failures.copy(), "discrepancy": peak})
    return orders


def grab(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """Centralized GraB: defined for one worker only."""
    if m != 1:
        raise ValueError("grab is defined for m = 1")
    return d_grab(m, n, d, seed, grads_per_epoch, stats=stats, **options)


# -- PairBalance ------------------------------------------------------------------------------------
def _pair_balance(m, n, d, seed, grads_per_epoch, coordinated, stats, options, pair_vector=None):
    """PairBalance. Pair k is visit positions (2k, 2k+1), v = g_first - g_second. Independent: every
    worker has its own running sum. Coordinated (CD-GraB): one sum shared by all workers, and for
    each pair index k the workers 0..m-1 take their turns in order. eps = +1 puts the first example at
    the row's slot k (left) and the second at slot n-1-k (right); eps = -1 the other way round.
    With n odd the last visited example takes the middle slot (n-1)/2. ``pair_vector(a, b)``
    (default a - b) is the vector a pair is balanced as (d wide)."""
    o = _options(**options)
    pair_vector = pair_vector or np.subtract
    rule = SignRule(m, n, d, seed, o["first_worker"], o["sign"], o["walk_c"], o["tie"])
    orders = [first_orders(m, n, seed, o["first_worker"], o["first_order"])]
    for epoch, grads in enumerate(grads_per_epoch):
        rule.start_epoch(epoch)
        order = orders[-1]
        new = np.full((m, n), -1, dtype=np.int64)
        sums = np.zeros((1 if coordinated else m, d))
        peak = 0.0
        for k in range(n // 2):  # pair index: outer loop
            left, right = k, n - 1 - k
            for i in range(m):  # workers: inner loop
                first, second = order[i, 2 * k], order[i, 2 * k + 1]
                v = pair_vector(grads[i, first], grads[i, second])
                s = sums[0 if coordinated else i]
                eps = rule(s, v, i, k)
                s += eps * v
                peak = max(peak, float(np.max(np.abs(s))))
                if eps > 0:
                    new[i, left], new[i, right] = first, second
                else:
                    new[i, left], new[i, right] = second, first
        if n % 2 == 1:
            new[:, n // 2] = order[:, n - 1]
        orders.append(new)
        if stats is not None:
            stats.append({"walk_failures": rule.failures.copy(), "discrepancy": peak})
    return orders


def d_grab_pair(m, n, d, seed, grads_per_epoch, stats=None, pair_vector=None, **options):
    return _pair_balance(m, n, d, seed, grads_per_epoch, False, stats, options, pair_vector)


def cd_grab(m, n, d, seed, grads_per_epoch, stats=None, pair_vector=None, **options):
    return _pair_balance(m, n, d, seed, grads_per_epoch, True, stats, options, pair_vector)


def pair_grab(m, n, d, seed, grads_per_epoch, stats=None, pair_vector=None, **options):
    """Centralized PairBalance: defined for one worker only."""
    if m != 1:
        raise ValueError("pair-grab is defined for m = 1")
    return _pair_balance(m, n, d, seed, grads_per_epoch, False, stats, options, pair_vector)


# -- the pair walks of Low-Rank Thinning ------------------------------------------------------------
KH_DELTA = 0.5  # kernel halving's failure probability delta (the Low-Rank Thinning code's default)


def _required(name, value):
    if value is None:
        raise ValueError(f"{name} must be given")
    return value


def _pair_walk(m, n, d, seed, grads_per_epoch, coordinated, stats, first_worker, first_order, decide, begin,
               pair_vector=None):
    """The pair walk of pair balance (pairs (2k, 2k+1), v = g_first - g_second, pair index outer,
    worker inner, one running sum per worker or one shared), with the sign of every decision
    taken by ``decide(s_row, v, i, k, decision)``; ``begin(epoch)`` starts an epoch. decision
    counts the epoch's decisions of the running sum: 1, 2, ... per row, or 1..m n/2 over the
    shared sum. Placement as in pair balance; n odd: the last example takes the middle slot.
    ``pair_vector(a, b)``: as in _pair_balance."""
    pair_vector = pair_vector or np.subtract
    orders = [first_orders(m, n, seed, first_worker, first_order)]
    for epoch, grads in enumerate(grads_per_epoch):
        failures = begin(epoch)
        order = orders[-1]
        new = np.full((m, n), -1, dtype=np.int64)
        sums = np.zeros((1 if coordinated else m, d))
        peak = 0.0
        for k in range(n // 2):
            for i in range(m):
                first, second = order[i, 2 * k], order[i, 2 * k + 1]
                v = pair_vector(grads[i, first], grads[i, second])
                row = 0 if coordinated else i
                decision = k * m + i + 1 if coordinated else k + 1
                eps = decide(row, sums[row], v, i, k, decision)
                sums[row] += eps * v
                peak = max(peak, float(np.max(np.abs(sums[row]))))
                new[i, k], new[i, n - 1 - k] = (first, second) if eps > 0 else (second, first)
        if n % 2 == 1:
            new[:, n // 2] = order[:, n - 1]
        orders.append(new)
        if stats is not None:
            stats.append({"walk_failures": failures.copy(), "discrepancy": peak})
    return orders


def _kernel_halving(m, n, d, seed, grads_per_epoch, coordinated, stats, epochs, options, pair_vector=None):
    """Kernel halving on pair differences (Low-Rank Thinning's KH-SGD; with ``coordinated`` the
    same rule over cd-grab's shared walk, cd-kh). Per decision k (1, 2, ... of the running sum's
    epoch) with v, beta = <v, v>, the penalty L_k = ln(P k e), P = ((4/delta)(ln E + 1))(1 + ln K)
    (K the decisions per epoch: n//2, or m (n//2) over the shared sum; e = epoch + 1), the state
    sigma (zero at every epoch start) and U = 2u - 1 with u the walk uniform of (worker i, pair k):
    if sigma L / beta <= 1 the threshold is a = beta and sigma <- 2 beta; otherwise r = sqrt(sigma L /
    beta), a = r beta, and sigma <- sigma + 2 beta (L + 1/2 - r) / L when L + 1/2 - r > 0.
    eps = +1 iff <s, v> <= U a; |<s, v>| > a counts a failure of row i. A zero difference
    (beta = 0) gets +1 and leaves sigma as it is."""
    o = _options(**options)
    epochs = _required("epochs", epochs)
    pairs = n // 2
    per_epoch = m * pairs if coordinated else pairs
    penalty_base = (4.0 / KH_DELTA) * (math.log(epochs) + 1.0) * (1.0 + math.log(max(per_epoch, 1)))
    run = {}

    def begin(epoch):
        run["epoch"] = epoch
        run["u"] = [stream(seed, "walk", o["first_worker"] + i, epoch).random(n) for i in range(m)]
        run["sigma"] = [0.0] * (1 if coordinated else m)
        run["failures"] = np.zeros(m, dtype=np.int64)
        return run["failures"]

    def decide(row, s, v, i, k, decision):
        beta = float(lane_dot(v, v))
        dot = float(lane_dot(s, v))
        if beta == 0.0:
            return 1
        penalty = math.log(penalty_base * decision * (run["epoch"] + 1))
        sigma = run["sigma"][row]
        ratio = sigma * penalty / beta
        if ratio <= 1.0:
            threshold = beta
            sigma = 2.0 * beta
        else:
            root = math.sqrt(ratio)
            threshold = root * beta
            growth = penalty + 0.5 - root
            if growth > 0.0:
                sigma = sigma + 2.0 * beta * growth / penalty
        run["sigma"][row] = sigma
        if abs(dot) > threshold:
            run["failures"][i] += 1
        uniform = 2.0 * run["u"][i][k] - 1.0
        return 1 if dot <= uniform * threshold else -1

    return _pair_walk(m, n, d, seed, grads_per_epoch, coordinated, stats, o["first_worker"], o["first_order"],
                      decide, begin, pair_vector)


def kh_sgd(m, n, d, seed, grads_per_epoch, stats=None, epochs=None, pair_vector=None, **options):
    """KH-SGD (Low-Rank Thinning): kernel halving on one worker's pair differences."""
    if m != 1:
        raise ValueError("kh-sgd is defined for m = 1")
    return _kernel_halving(m, n, d, seed, grads_per_epoch, False, stats, epochs, options, pair_vector)


def cd_kh(m, n, d, seed, grads_per_epoch, stats=None, epochs=None, pair_vector=None, **options):
    """cd-kh (ordersim's own): kernel halving over cd-grab's walk shared by all workers."""
    return _kernel_halving(m, n, d, seed, grads_per_epoch, True, stats, epochs, options, pair_vector)


def sbw(m, n, d, seed, grads_per_epoch, stats=None, epochs=None, b_max=None, pair_vector=None, **options):
    """The self-balancing walk on pair differences with the Low-Rank Thinning code's constant:
    pair-grab's walk sign (eps = +1 iff u < 1/2 - <s, v>/(2C), u the walk uniform of pair k; a
    failure when |<s, v>| > C) with C = b (30 ln(n E d / (2 delta))), delta = 1/2. b is the option
    b_max; by default the largest ||v||_2 = sqrt(<v, v>) of the previous epoch, and in the first
    epoch (or after an epoch whose differences were all zero) the largest so far in this epoch,
    the current pair's included. C = 0 (no non-zero difference yet: s = 0) gives probability 1/2."""
    if m != 1:
        raise ValueError("sbw is defined for m = 1")
    o = _options(**options)
    epochs = _required("epochs", epochs)
    scale = 30.0 * math.log(n * epochs * d / (2.0 * KH_DELTA))
    run = {"previous": 0.0}

    def begin(epoch):
        run["previous"], run["largest"] = run.get("largest", 0.0), 0.0
        run["u"] = stream(seed, "walk", o["first_worker"], epoch).random(n)
        run["failures"] = np.zeros(m, dtype=np.int64)
        return run["failures"]

    def decide(row, s, v, i, k, decision):
        run["largest"] = max(run["largest"], math.sqrt(float(lane_dot(v, v))))
        bound = b_max if b_max is not None else run["previous"] if run["previous"] > 0.0 else run["largest"]
        c = bound * scale
        dot = float(lane_dot(s, v))
        if abs(dot) > c:
            run["failures"][i] += 1
        probability = 0.5 - dot / (2.0 * c) if c > 0.0 else 0.5
        return 1 if run["u"][k] < probability else -1

    return _pair_walk(m, n, d, seed, grads_per_epoch, False, stats, o["first_worker"], o["first_order"],
                      decide, begin, pair_vector)


# -- recursive pair balance ----------------------------------------------------------------------------
def recursive_pair(m, n, d, seed, grads_per_epoch, stats=None, block=8, pair_vector=None, **options):
    """grab-sampler's recursive pair balance, every worker on its own. The visit order is cut into
    blocks of B = ``block`` = 2^p consecutive positions (the last n mod B positions are no block).
    A block's examples go through a binary tree of B - 1 nodes (heap order: node t's children are
    2t + 1, the "+" half, and 2t + 2, the "-" half), each with an accumulator in R^d that persists
    over the epoch's blocks (zero at its start). At a node with the list x of 2q examples: the
    pairs (x[2j], x[2j+1]) give v_j = g_first - g_second, every v_j is signed against the node's
    accumulator as it stands when the node is reached in this block (all of the node's pairs
    against the same one), then acc += eps_j v_j for j in order; the "+" half (the example each
    pair sends left: its first if eps = +1, else its second) and the "-" half, each in pair order,
    go to the children; a node of one example is a leaf. The block's leaves in tree order (the "+"
    subtree first) form its batch order L_j. Decisions are numbered in level order: block j's pair
    j' of the node at level l, position r in its level (node t = 2^l - 1 + r, B / 2^(l+1) pairs)
    is decision j p B/2 + l B/2 + r B/2^(l+1) + j'; the walk's k-th decision of the epoch uses u[k]
    of stream(seed, "walk", w, e).random(blocks p B/2).
    Next order: for i = 0..B-1, the i-th examples L_j[i] of all blocks j in block order (in reverse
    block order when i is odd); the n mod B examples after the last block, in visit order, go
    between the first B/2 of these runs and the last B/2. With B = 2 this is pair balance.
    ``pair_vector(a, b)``: as in _pair_balance."""
    o = _options(**options)
    pair_vector = pair_vector or np.subtract
    B = block
    levels = B.bit_length() - 1
    if B < 2 or B != 1 << levels:
        raise ValueError(f"block must be a power of two >= 2, got {B}")
    blocks, per_block = n // B, levels * B // 2
    walk_c = default_walk_c(m * n, d) if o["walk_c"] is None else o["walk_c"]
    orders = [first_orders(m, n, seed, o["first_worker"], o["first_order"])]
    for epoch, grads in enumerate(grads_per_epoch):
        order = orders[-1]
        new = np.empty((m, n), dtype=np.int64)
        failures = np.zeros(m, dtype=np.int64)
        peak = 0.0
        for i in range(m):
            rule = SignRule(1, n, d, seed, o["first_worker"] + i, o["sign"], walk_c, o["tie"])
            rule.u = [stream(seed, "walk", o["first_worker"] + i, epoch).random(blocks * per_block)]
            acc = np.zeros((B - 1, d))  # d: the balanced dimension (k under a projection)

            def balance(j, node, examples):
                nonlocal peak
                if len(examples) == 1:
                    return list(examples)
                level = (node + 1).bit_length() - 1
                first_decision = j * per_block + level * B // 2 + (node + 1 - (1 << level)) * len(examples) // 2
                s = acc[node].copy()
                plus, minus, signed = [], [], []
                for q in range(len(examples) // 2):
                    first, second = examples[2 * q], examples[2 * q + 1]
                    v = pair_vector(grads[i, first], grads[i, second])
                    eps = rule(s, v, 0, first_decision + q)
                    signed.append(eps * v)
                    plus.append(first if eps > 0 else second)
                    minus.append(second if eps > 0 else first)
                for w in signed:
                    acc[node] += w
                    peak = max(peak, float(np.max(np.abs(acc[node]))))
                return balance(j, 2 * node + 1, plus) + balance(j, 2 * node + 2, minus)

            # level order and depth first give the same accumulators: a node is reached once per block
            leaves = [balance(j, 0, list(order[i, j * B:(j + 1) * B])) for j in range(blocks)]
            runs = [[leaves[j][r] for j in (range(blocks) if r % 2 == 0 else reversed(range(blocks)))]
                    for r in range(B)]
            rest = list(order[i, blocks * B:])
            new[i] = sum(runs[:B // 2], []) + rest + sum(runs[B // 2:], [])
            failures[i] = rule.failures[0]
        orders.append(new)
        if stats is not None:
            stats.append({"walk_failures": failures, "discrepancy": peak})
    return orders


# -- greedy herding ----------------------------------------------------------------------------------
def greedy(m, n, d, seed, grads_per_epoch, stats=None, **options):
    """Offline herding per worker: center the epoch's n gradients on their mean, then repeatedly take
    the unused example j minimizing ||s + z_j||_2 (ties: the smallest j), s += z_j."""
    o = _options(**options)
    orders = [first_orders(m, n, seed, o["first_worker"], o["first_order"])]
    for grads in grads_per_epoch:
        new = np.empty((m, n), dtype=np.int64)
        for i in range(m):
            z = grads[i] - grads[i].mean(axis=0)
            s = np.zeros(d)
            unused = list(range(n))
            for slot in range(n):
                norms = [np.linalg.norm(s + z[j]) for j in unused]
                j = unused.pop(int(np.argmin(norms)))
                new[i, slot] = j
                s += z[j]
        orders.append(new)
    return orders



# -- random projection and grouped balancing ------------------------------------------------------
JL_EPS = 0.1  # the distortion of the projection's default k


def random_projection(seed, kind, k, d):
    """The function v -> Pi v of the run's projection, drawn from stream(seed, "projection", 0, 0).
    gaussian: Pi = standard_normal((k, d)) / sqrt(k), row r of Pi v = lane_dot(Pi_r, v). sparse:
    rho = 1/sqrt(d), sigma = 1/sqrt(k rho); row by row c = binomial(d, rho) columns
    choice(d, c, replace=False), each +sigma where random(c) < 1/2, else -sigma; row r of Pi v =
    sigma (P - M), P (M) the sum of v over the row's + (-) columns, added in ascending column
    order from 0.0."""
    rng = stream(seed, "projection")
    if kind == "gaussian":
        matrix = rng.standard_normal((k, d)) / math.sqrt(k)
        return lambda v: np.array([lane_dot(matrix[r], v) for r in range(k)])
    rho = 1.0 / math.sqrt(d)
    sigma = 1.0 / math.sqrt(k * rho)
    rows = []
    for _ in range(k):
        columns = rng.choice(d, rng.binomial(d, rho), replace=False)
        plus = rng.random(len(columns)) < 0.5
        rows.append((sorted(columns[plus]), sorted(columns[~plus])))

    def apply(v):
        out = []
        for plus_columns, minus_columns in rows:
            total_plus = total_minus = 0.0
            for c in plus_columns:
                total_plus += v[c]
            for c in minus_columns:
                total_minus += v[c]
            out.append(sigma * (total_plus - total_minus))
        return np.array(out)

    return apply


def default_projection_dim(units, d):
    """scikit-learn's Johnson-Lindenstrauss bound at eps = 0.1 for the vectors one running sum
    balances in an epoch, at least 1, at most d."""
    from sklearn.random_projection import johnson_lindenstrauss_min_dim

    return int(min(d, max(1, int(johnson_lindenstrauss_min_dim(units, eps=JL_EPS)))))


def with_units(reference, pairs=False, coordinated=False):
    """``reference`` with the options projection, projection_dim and group (docs/algorithms.md,
    "Random projection before balancing", "Grouped balancing"). Groups: row i's units are the
    first order's positions u r .. u r + r - 1 (u < n // r), which move as units ever after (the
    n mod r positions after them stay last, in the same order); a unit's gradient is the mean of
    its examples' (summed in their order from 0.0, divided by r). The reference runs on the units
    (identity first order: the units are numbered by their first positions), on their projected
    gradients (mean balance) or with v = Pi (a - b) for a pair (pairs), and its unit orders are
    expanded. walk_c stays the orderer's default for the run's m n examples and d."""
    @functools.wraps(reference)  # its name: the spec names the reference
    def run(m, n, d, seed, grads_per_epoch, stats=None, projection="none", projection_dim=None, group=1,
            **options):
        if projection == "none" and group == 1:
            return reference(m, n, d, seed, grads_per_epoch, stats=stats, **options)
        first_worker, first_order = options.pop("first_worker", 0), options.pop("first_order", "random")
        if options.get("walk_c") is None:
            options["walk_c"] = default_walk_c(m * n, d)
        units = n // group
        first = first_orders(m, n, seed, first_worker, first_order)
        members, rest = first[:, :units * group].reshape(m, units, group), first[:, units * group:]
        rows = np.arange(m)[:, None]
        unit_grads = []
        for grads in grads_per_epoch:
            total = np.zeros((m, units, d))
            for j in range(group):
                total = total + grads[rows, members[:, :, j]]
            unit_grads.append(total / group)
        balanced = d
        if projection != "none":
            balanced = projection_dim or default_projection_dim(units * (m if coordinated else 1), d)
            apply = random_projection(seed, projection, balanced, d)
            if pairs:
                options["pair_vector"] = lambda a, b: apply(a - b)
            else:
                unit_grads = [np.array([[apply(g[i, u]) for u in range(units)] for i in range(m)]).reshape(
                    m, units, balanced)
                              for g in unit_grads]
        unit_orders = reference(m, units, balanced, seed, unit_grads, stats=stats, first_worker=first_worker,
                                first_order="identity", **options)
        return [np.concatenate([np.take_along_axis(members, order[:, :, None], axis=1).reshape(m, -1), rest],
                               axis=1) for order in unit_orders]

    run.__doc__ = f"{reference.__doc__ or ''}\n\nWith projection and group: see with_units."
    return run


REFERENCES = {
    "rr": rr,
    "so": so,
    "ig": ig,
    "flipflop": flipflop,
    "wr": wr,
    "grab": with_units(grab),
    "d-grab": with_units(d_grab),
    "pair-grab": with_units(pair_grab, pairs=True),
    "d-grab-pair": with_units(d_grab_pair, pairs=True),
    "cd-grab": with_units(cd_grab, pairs=True, coordinated=True),
    "greedy": with_units(greedy),
    "kh-sgd": with_units(kh_sgd, pairs=True),
    "cd-kh": with_units(cd_kh, pairs=True, coordinated=True),
    "sbw": with_units(sbw, pairs=True),
    "recursive-pair": with_units(recursive_pair, pairs=True),
}


# -- building and driving a real orderer --------------------------------------------------------------
TEST_OPTIONS = {"epochs": 4}  # what the tests give a required option when a test does not choose


def required_options(name, options=None):
    """``options`` with every option that orderer ``name`` requires (its ``required_options``, e.g.
    kh-sgd's ``epochs``) added at the tests' value unless given."""
    from ordersim.orderers import orderer_class

    options = dict(options or {})
    for option in getattr(orderer_class(name), "required_options", ()):
        options.setdefault(option, TEST_OPTIONS[option])
    return options


def make_orderer(name, workers, examples, dim, seed=0, **options):
    """ordersim.orderers.make_orderer, with the options the orderer requires (``required_options``)
    at the tests' values unless given: the suite builds every registered orderer the same way."""
    from ordersim.orderers import make_orderer as make

    return make(name, workers, examples, dim, seed, **required_options(name, options))


# -- driving a real orderer ---------------------------------------------------------------------------
def drive(orderer, grads_per_epoch, b, stats=None):
    """Run ``orderer`` over the epochs of ``grads_per_epoch`` (each (m, n, d), by local example id),
    feeding it every row's gradients in visit order, b examples per step (the last step may be
    shorter). Returns the orders like a reference does. If ``stats`` is a list, appends per epoch
    the orderer's walk_failures and balance_discrepancy (when it has them)."""
    n = orderer.examples
    orders = []
    for grads in grads_per_epoch:
        order = orderer.begin_epoch()
        orders.append(order)
        for start in range(0, n, b):
            idx = order[:, start:start + b]
            orderer.observe(np.ascontiguousarray(np.take_along_axis(grads, idx[:, :, None], axis=1)))
        orderer.end_epoch()
        if stats is not None and hasattr(orderer, "walk_failures"):
            stats.append({"walk_failures": orderer.walk_failures.copy(),
                          "discrepancy": orderer.balance_discrepancy})
    orders.append(orderer.order.copy())
    return orders


def drive_pair_differences(orderer, grads_per_epoch, pairs, stats=None):
    """``drive`` through a pair orderer's pair_difference_kernel, as the serial backend feeds it:
    every row's pair differences g_2k - g_2k+1 in visit order, ``pairs`` pairs per call (the last
    one may be shorter), then a call without pairs, which counts an unpaired last example (n odd)
    if no call has yet."""
    n, kernel = orderer.examples, orderer.pair_difference_kernel
    orders = []
    for grads in grads_per_epoch:
        order = orderer.begin_epoch()
        orders.append(order)
        visited = np.take_along_axis(grads, order[:, :, None], axis=1)
        differences = visited[:, 0:n - 1:2] - visited[:, 1::2]
        for start in range(0, n // 2, pairs):
            chunk = np.ascontiguousarray(differences[:, start:start + pairs])
            assert kernel(chunk, orderer.state) == chunk.shape[1]
        assert kernel(np.zeros((orderer.workers, 0, orderer.dim)), orderer.state) == 0
        orderer.end_epoch()
        if stats is not None:
            stats.append({"walk_failures": orderer.walk_failures.copy(),
                          "discrepancy": orderer.balance_discrepancy})
    orders.append(orderer.order.copy())
    return orders
