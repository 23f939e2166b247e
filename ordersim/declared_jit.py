"""``njit`` with explicit signatures that compile (or load from Numba's cache) on first use, not
at import.

``njit([sig, ...])`` compiles every signature when the decorator runs, so importing a module of
such kernels costs their whole compilation (seconds, cold): listing the orderers or printing
``--help`` would pay it. A kernel decorated with ``njit_declared([sig, ...])`` behaves as the eager
one from its first use on (a call from Python, from jitted code, as a first-class function, or
``.compile``): it then compiles exactly the declared signatures and disables further compilation,
so arguments of any other type raise TypeError at dispatch as before.

With NUMBA_DISABLE_JIT=1 the decorator returns the Python function, as ``njit`` does.
"""

from numba import config
from numba.core import sigutils, typeinfer
from numba.core.registry import CPUDispatcher


class DeclaredSignaturesDispatcher(CPUDispatcher):
    """A CPU dispatcher whose ``declared`` signatures compile at its first use, then no other."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.declared, self._pending = (), False  # njit_declared sets both

    def _compile_declared(self) -> None:
        if not self._pending:
            return
        self._pending = False
        with typeinfer.register_dispatcher(self):  # as numba's njit(sigs) does
            for signature in self.declared:
                super().compile(signature)
        self.disable_compile()

    def compile(self, sig):
        if self._pending:
            self._compile_declared()
            args, _ = sigutils.normalize_signature(sig)
            if tuple(args) in self.overloads:
                return self.overloads[tuple(args)].entry_point
        return super().compile(sig)  # RuntimeError("compilation disabled"), as eager

    def _compile_for_args(self, *args, **kws):
        # A call from Python that matched no signature: with the declared ones compiled,
        # dispatching again converts the arguments as the eager kernel would, or raises TypeError.
        if self._pending:
            self._compile_declared()
            return self
        return super()._compile_for_args(*args, **kws)

    def get_call_template(self, args, kws):
        self._compile_declared()  # a call from jitted code types against the declared signatures
        return super().get_call_template(args, kws)

    def _reduce_states(self):
        # unpickled, it compiles the declared signatures and no other, as an eager kernel does
        states = super()._reduce_states()
        if self._pending:
            states.update(can_compile=False, sigs=list(self.declared))
        return states


def njit_declared(signatures, cache=False, **options):
    """Decorator: ``numba.njit(signatures, cache=cache, **options)``, compiled at first use."""
    def decorate(function):
        if config.DISABLE_JIT:
            return function
        dispatcher = DeclaredSignaturesDispatcher(
            py_func=function, locals={}, targetoptions={"nopython": True, "boundscheck": None, **options})
        if cache:
            dispatcher.enable_caching()
        dispatcher.declared, dispatcher._pending = tuple(signatures), True
        return dispatcher
    return decorate
