"""Numba kernels of one SGD step, shared by the serial and the MPI backend.

Both backends compute the same floating-point operations in the same order: every worker's
gradient sum is accumulated over its b examples in visit order, and the workers' sums are added in
worker order. That is what makes traces bitwise identical whatever the number of ranks.
"""

import numpy as np
from numba import njit


@njit  # takes the problem's kernel as an argument: not cacheable (numba#2956)
def worker_step(batch_grads, x, A, y, params, order, row, base, pos, count, idx, grads, grad_sum):
    """Gradients of one worker's next `count` examples (visit positions pos..pos+count-1).

    Local example e of local row `row` is row base + e of A. Writes the per-example gradients to
    grads[:count] and their sum (in visit order) to grad_sum; returns the sum of the losses.
    """
    for r in range(count):
        idx[r] = base + order[row, pos + r]
    loss = batch_grads(x, A, y, idx[:count], params, grads[:count])
    grad_sum[:] = 0.0
    for r in range(count):
        for k in range(grad_sum.shape[0]):
            grad_sum[k] += grads[r, k]
    return loss


@njit(cache=True)
def apply_update(x, velocity, worker_sums, count, lr, momentum, weight_decay):
    """x -= lr * v with v = momentum v + g, g = (sum over workers in worker order) / count + wd x.

    Returns whether every entry of x is still finite (the divergence check, at no extra pass).
    Every entry sees the same operations in the same order as a plain loop over k with the workers
    added inside; the loops are only arranged so that LLVM can vectorize them over k.
    """
    m, d = worker_sums.shape
    total = np.zeros(d)
    for w in range(m):
        for k in range(d):
            total[k] += worker_sums[w, k]
    finite = True
    for k in range(d):
        g = total[k] / count + weight_decay * x[k]
        if momentum != 0.0:
            velocity[k] = momentum * velocity[k] + g
            g = velocity[k]
        x[k] -= lr * g
        finite &= x[k] - x[k] == 0.0  # False for inf and NaN
    return finite


@njit(cache=True)
def row_sums(grads, out):
    """out[w] = sum of grads[w, r] over r in visit order (the same sum worker_step computes)."""
    m, count, d = grads.shape
    for w in range(m):
        out[w, :] = 0.0
        for r in range(count):
            for k in range(d):
                out[w, k] += grads[w, r, k]


@njit(cache=True)
def sum_in_worker_order(worker_values):
    """Column sums of (m, k) values, adding rows in worker order."""
    m, k = worker_values.shape
    total = np.zeros(k)
    for w in range(m):
        for j in range(k):
            total[j] += worker_values[w, j]
    return total


@njit  # takes the problem's kernel as an argument: not cacheable (numba#2956)
def serial_steps(batch_grads, x, velocity, A, y, params, order, n, pos, steps, b, lr, momentum,
                 weight_decay, store, grads_out, idx, scratch, worker_sums, step_losses):
    """`steps` synchronous steps of all m workers inside one jitted call (the serial fast path).

    With store, worker w's per-example gradients go to grads_out[w, :] in visit order, for the
    orderer to observe afterwards. Returns the number of examples per worker done, or -1 when the
    loss or the model stopped being finite (divergence).
    """
    m = order.shape[0]
    done = 0
    for s in range(steps):
        count = min(b, n - pos)
        loss = 0.0
        for w in range(m):
            # with store, the kernel writes straight into grads_out (no copy through scratch)
            out = grads_out[w, done:done + count] if store else scratch
            loss += worker_step(batch_grads, x, A, y, params, order, w, w * n, pos, count, idx,
                                out, worker_sums[w])
        finite = apply_update(x, velocity, worker_sums, m * count, lr, momentum, weight_decay)
        step_losses[s] = loss / (m * count)
        if not finite or not np.isfinite(loss):
            return -1
        pos += count
        done += count
    return done


@njit(cache=True)
def apply_coded_update(x, velocity, history, coef, step, lr, momentum, weight_decay):
    """The update of a decoded scheme (ignore-stragglers, pipelined GC) at global step `step`.

    history (s+1, k, d): partition j's gradient sum of step u is history[u mod (s+1), j];
    coef (k, s+1): the step's update coefficients (EpochClock.update_coefficients, the decode
    weights already divided by k times the examples per partition). g = Σ_j Σ_age coef[j, age] ·
    history[(step − age) mod (s+1), j], partitions in order, ages in order inside, zero
    coefficients skipped; then weight decay, momentum and the step as in apply_update. Returns
    whether x is still finite.
    """
    slots, k, d = history.shape
    total = np.zeros(d)
    for j in range(k):
        for age in range(slots):
            c = coef[j, age]
            if c != 0.0:
                slot = (step - age) % slots
                for i in range(d):
                    total[i] += c * history[slot, j, i]
    finite = True
    for i in range(d):
        g = total[i] + weight_decay * x[i]
        if momentum != 0.0:
            velocity[i] = momentum * velocity[i] + g
            g = velocity[i]
        x[i] -= lr * g
        finite &= x[i] - x[i] == 0.0
    return finite


@njit  # takes the problem's kernel as an argument: not cacheable (numba#2956)
def serial_steps_coded(batch_grads, x, velocity, A, y, params, order, n, pos, steps, b, lr, momentum,
                       weight_decay, store, grads_out, idx, scratch, history, coef, step, step_losses):
    """serial_steps for a decoded scheme: every partition's gradient sum of global step u goes to
    history[u mod (s+1)] and the update is apply_coded_update with coef[s] (coef: this chunk's
    (steps, k, s+1) coefficients; `step` the global index of its first step)."""
    m = order.shape[0]
    slots = history.shape[0]
    done = 0
    for s in range(steps):
        count = min(b, n - pos)
        sums = history[(step + s) % slots]
        loss = 0.0
        for w in range(m):
            out = grads_out[w, done:done + count] if store else scratch
            loss += worker_step(batch_grads, x, A, y, params, order, w, w * n, pos, count, idx,
                                out, sums[w])
        finite = apply_coded_update(x, velocity, history, coef[s], step + s, lr, momentum, weight_decay)
        step_losses[s] = loss / (m * count)
        if not finite or not np.isfinite(loss):
            return -1
        pos += count
        done += count
    return done


_LOCAL_STEPS = {}


def local_steps(batch_grads, update):
    """The MPI backend's per-step kernel for one problem kernel and one update rule, compiled once
    per pair:

        ok = kernel(x, velocity, due, lr, momentum, weight_decay,
                    A, y, params, order, n, pos, count, idx, grads, sums, losses, *update_args)

    first applies the previous step's update when `due` — update(x, velocity, *update_args, lr,
    momentum, weight_decay): apply_update with (all_sums, m * count), or apply_coded_update with
    (history, coef, step) — and returns False if x stopped being finite; then computes every local
    worker's gradients and sums for visit positions pos..pos+count-1. One call per step: both
    kernels are bound in the closure rather than passed as arguments, since a dispatcher argument
    costs microseconds of Python type dispatch per call.
    """
    kernel = _LOCAL_STEPS.get((batch_grads, update))
    if kernel is None:
        @njit
        def kernel(x, velocity, due, lr, momentum, weight_decay, A, y, params, order, n, pos, count,
                   idx, grads, sums, losses, *update_args):
            if due and not update(x, velocity, *update_args, lr, momentum, weight_decay):
                return False
            for w in range(order.shape[0]):
                losses[w, 0] = worker_step(batch_grads, x, A, y, params, order, w, w * n, pos, count,
                                           idx, grads[w], sums[w])
            return True
        _LOCAL_STEPS[(batch_grads, update)] = kernel
    return kernel


@njit  # takes the problem's kernel as an argument: not cacheable (numba#2956)
def step_sums_of_order(batch_grads, x, A, y, params, order, row, base, first_step, steps, b, n,
                       idx, scratch, out):
    """Sums of one worker's per-example gradients at x over each of `steps` steps of its order."""
    for s in range(steps):
        pos = (first_step + s) * b
        count = min(b, n - pos)
        worker_step(batch_grads, x, A, y, params, order, row, base, pos, count, idx, scratch, out[s])


@njit(cache=True)
def accumulate_herding(gathered, step_counts, mean, prefix, peaks):
    """Advance the parallel-herding prefix over a chunk of steps.

    gathered (m, K, d): every worker's gradient sum per step; step_counts (K,): examples per worker
    in each step. prefix += sum_w gathered[w, s] - m * count * mean (workers in worker order), and
    peaks[0], peaks[1] track the largest inf- and 2-norm of the prefix.
    """
    m, steps, d = gathered.shape
    for s in range(steps):
        inf_norm = 0.0
        two = 0.0
        for k in range(d):
            acc = 0.0
            for w in range(m):
                acc += gathered[w, s, k]
            prefix[k] += acc - m * step_counts[s] * mean[k]
            inf_norm = max(inf_norm, abs(prefix[k]))
            two += prefix[k] * prefix[k]
        peaks[0] = max(peaks[0], inf_norm)
        peaks[1] = max(peaks[1], np.sqrt(two))
