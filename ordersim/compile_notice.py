"""One line when Numba compiles, so that a cold start (15-60 s of compilation) is not silent.

    with compile_notice("the kernels of cd-grab", enabled=rank == 0):
        warm_up(...)

Numba signals every real compilation (not a load from its on-disk cache) with a "numba:compile"
event; the first one inside the block prints "compiling ...", and the block's end prints the
seconds the compilations took, split into kernels that Numba caches on disk (compiled once per
machine and code state: `python -m ordersim warm` can do it ahead of a job) and the kernels
Numba cannot cache, which every process compiles (the step loops of a problem kernel that its
name does not identify: numba_cache.kernel_digest). A compilation inside a cacheable one (an
uncached helper it calls) counts as cacheable: its machine code is cached with the caller's.
Nothing is printed when nothing compiled, e.g. under NUMBA_DISABLE_JIT=1.
"""

import sys
import time
from contextlib import contextmanager

from numba.core import event

from ordersim.numba_cache import cached_on_disk


# what the summary says of each kind of kernel, after its seconds
CACHED = "now cached on disk (compiled again only on another machine or after a code change)"
PER_PROCESS = ("which Numba cannot cache, compiled in every process (the loops of a problem kernel "
               "its name does not identify)")


def _cacheable(compile_event) -> bool:
    return cached_on_disk((compile_event.data or {}).get("dispatcher"))


class CompileTimer(event.Listener):
    """Seconds of Numba compilation, each charged to the innermost compilation in progress:
    seconds[True] for cacheable kernels (and the compilations inside them), seconds[False] for
    the others."""

    def __init__(self, what: str, enabled: bool):
        self.what, self.enabled = what, enabled
        self.stack: list[bool] = []  # cacheable? of every compilation in progress (they nest)
        self.seconds = {True: 0.0, False: 0.0}
        self.compiled = False
        self.last = 0.0

    def _charge(self):
        now = time.perf_counter()
        if self.stack:
            self.seconds[self.stack[-1]] += now - self.last
        self.last = now

    def on_start(self, compile_event):
        self._charge()
        if self.enabled and not self.compiled:
            print(f"ordersim: compiling {self.what} ...", file=sys.stderr, flush=True)
        self.compiled = True
        self.stack.append(_cacheable(compile_event) or (bool(self.stack) and self.stack[-1]))

    def on_end(self, _event):
        self._charge()
        self.stack.pop()

    def summary(self) -> str:
        """One line: the total time, and how it splits only when both kinds compiled (one kind
        alone would say its time twice)."""
        kinds = [(seconds, text) for seconds, text in ((self.seconds[True], CACHED),
                                                       (self.seconds[False], PER_PROCESS)) if seconds]
        total = sum(seconds for seconds, _ in kinds)
        if len(kinds) == 1:
            return f"ordersim: compiled {self.what} in {total:.1f} s, {kinds[0][1]}"
        return (f"ordersim: compiled {self.what} in {total:.1f} s: "
                + "; ".join(f"{seconds:.1f} s {text}" for seconds, text in kinds))


@contextmanager
def compile_notice(what: str, enabled: bool = True):
    """Say so (on stderr, when `enabled`) when Numba compiles inside the block, and how long it took."""
    timer = CompileTimer(what, enabled)
    with event.install_listener("numba:compile", timer):
        yield timer
    if enabled and timer.compiled:
        print(timer.summary(), file=sys.stderr, flush=True)
