import os

# One Numba/BLAS thread per rank unless the user says otherwise (ranks already fill the cores).
for _variable in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

from ordersim.cli import main  # noqa: E402  (after the thread settings, before numpy loads)

raise SystemExit(main())
