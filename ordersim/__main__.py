import os

# One Numba/BLAS thread per rank unless the user says otherwise (ranks already fill the cores).
for _variable in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

# Under Slurm, Numba's cache goes to node-local disk, one directory per job, unless the user chose
# a place: next to the sources on a shared file system, many nodes would write it at once. The CLI
# creates it (mode 0700) and refuses it if it is not private (ordersim.numba_cache).
if "SLURM_JOB_ID" in os.environ:
    os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"ordersim-numba-{os.environ['SLURM_JOB_ID']}"))

from ordersim.cli import script  # noqa: E402  (after the settings above, before numpy and numba load)

script()
