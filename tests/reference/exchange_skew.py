"""Exchanges with the ranks arriving skewed: shared by the in-rank tests (tests/mpi/) and the
plain-Python subprocess test (tests/test_node_exchange.py, NUMBA_DISABLE_JIT=1)."""

import numpy as np
from numba import njit

from ordersim.node_exchange import exchange


@njit
def exchange_many(link, rank, size, calls, received):
    """`calls` exchanges of `size` values per rank into received[c]; the count of errors.
    Rank- and call-dependent work before each exchange makes the ranks arrive in a changing order,
    so that a rank that is ahead overwrites its slot while others still read."""
    errors = 0
    send = np.empty(size)
    spin = 0.0
    for c in range(calls):
        for i in range(((c * 7 + rank * 3) % 5) * 400):
            spin += 1e-9 * i
        for i in range(size):
            send[i] = rank * 1e6 + c * 1e2 + i
        errors += exchange(send, received[c], link)
    return errors + (spin < 0)
