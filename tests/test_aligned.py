"""Cache-line alignment of the hot loops' arrays (ordersim/aligned.py): a speed matter only, so
what is tested is that the arrays do start on a line, keep their values, and survive pickling."""


import numpy as np
import pytest

from ordersim import aligned, checkpoint
from ordersim.orderers import available_orderers, orderer_class
from reference.orderers import make_orderer  # ordersim's, with the options some orderers require


def starts_on_line(array: np.ndarray) -> bool:
    return array.ctypes.data % aligned.CACHE_LINE == 0


@pytest.mark.parametrize("shape", [7, (3,), (2, 3), (4, 1, 5), (0,), (0, 5)])
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float32, np.uint8])
def test_empty_and_zeros_start_on_a_line(shape, dtype):
    for make in (aligned.empty, aligned.zeros):
        for _ in range(5):  # a plain allocation is 16-byte aligned: one in four would pass by chance
            a = make(shape, dtype)
            assert a.shape == ((shape,) if isinstance(shape, int) else shape) and a.dtype == dtype
            assert a.flags.c_contiguous and a.flags.writeable
            assert a.size == 0 or starts_on_line(a)
    assert not aligned.zeros((3, 5), dtype).any()


def test_on_cache_line_copies_only_when_needed():
    raw = np.arange(40, dtype=np.float64)
    misaligned = next(raw[k:k + 30] for k in range(8) if not starts_on_line(raw[k:k + 30]))
    moved = aligned.on_cache_line(misaligned)
    assert starts_on_line(moved) and np.array_equal(moved, misaligned) and moved.dtype == misaligned.dtype
    kept = aligned.on_cache_line(moved)
    assert kept is moved
    strided = aligned.on_cache_line(aligned.zeros((4, 6))[:, ::2])  # not C-contiguous: copied
    assert strided.flags.c_contiguous and starts_on_line(strided)


def through_a_checkpoint_file(tmp_path, state: dict) -> dict:
    """state as --resume gets it back: written to a real checkpoint file and read again."""
    path = str(tmp_path / "state.ckpt")
    checkpoint.save(path, {"run_states": [state]})
    return checkpoint.load(path)["run_states"][0]


@pytest.mark.parametrize("name", [n for n in available_orderers() if orderer_class(n).needs_gradients])
def test_state_arrays_start_on_a_line_also_after_a_checkpoint(name, tmp_path):
    """Every array of a gradient-observing orderer's state buffer starts on a cache line, the
    buffer restored from a checkpoint file too (HDF5 gives its arrays back anywhere)."""
    m = 1 if orderer_class(name).centralized_alternatives else 3
    o = make_orderer(name, m, 13, 21, seed=1)
    o.begin_epoch()
    o.observe(np.random.default_rng(0).standard_normal((m, 3, 21)))
    restored = make_orderer(name, m, 13, 21, seed=1)
    restored.restore_state(through_a_checkpoint_file(tmp_path, o.checkpoint_state()))
    for copy in (o, restored):
        views = copy.state_layout.fields
        assert views, name
        for view in views:
            assert starts_on_line(getattr(copy, view)), f"{name}: {view} is not on a cache line"
    assert np.array_equal(restored.state, o.state)


def test_the_step_loops_arrays_start_on_a_line(tmp_path):
    """The data rows, the model and the optimizer state of a run, also restored from a
    checkpoint file, start on a cache line (A with d = 10: rows of 80 bytes, most of them
    straddling lines; only its start can be on one)."""
    from ordersim.backend import SerialBackend
    from ordersim.config import build_config
    from ordersim.simulate import Run, check_fields, prepare

    values = dict(data="synthetic:classification?n=400&d=9", test_fraction=0.25, workers=4,
                  orderers=["cd-grab"], seeds=[0], momentum=0.5, quiet=True, out=str(tmp_path / "t.h5"))
    setup = prepare(check_fields(build_config(values), 1), SerialBackend(4))
    assert starts_on_line(setup.A) and starts_on_line(setup.test_A)
    run = Run(setup, "cd-grab", 0)
    assert run.train_epoch(1, 0.1)
    restored = Run(setup, "cd-grab", 0)
    restored.restore(through_a_checkpoint_file(tmp_path, run.state()))
    for r in (run, restored):
        assert starts_on_line(r.x) and starts_on_line(r.velocity) and starts_on_line(r.orderer.running_sum)
    assert np.array_equal(restored.x, run.x)


# The rows rank 0 sends every rank start on a cache line too: tests/mpi/test_epoch_loop_mpi.py.
