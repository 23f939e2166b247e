"""ordersim/trace.py's appends: rows written as whole chunks (H5Dwrite_chunk) read back through
h5py as appended, across chunk boundaries, in 2-D datasets, and after a resume that cut a run
back to the middle of a chunk; epochs_completed follows every measured epoch."""

import json
import h5py
import numpy as np

from ordersim.trace import MAX_CHUNK_ROWS, TraceWriter


def epoch_record(epoch: int) -> dict:
    return dict(epoch=epoch, train_loss=1.0 / (epoch + 1), test_loss=None, wall_time=0.5 * epoch)


def test_rows_crossing_chunk_boundaries_read_back_as_appended(tmp_path):
    path = tmp_path / "t.h5"
    writer = TraceWriter(str(path), {"config": "{}"})
    run = writer.start_run("rr", 0, {})  # appends unknown: chunks of MAX_CHUNK_ROWS rows
    rng = np.random.default_rng(0)
    # after the fourth append, 2048 rows: the second chunk fills exactly
    sizes = [700, 700, 1, MAX_CHUNK_ROWS - 377, 2 * MAX_CHUNK_ROWS + 5]
    steps = [rng.integers(0, 10**9, size) for size in sizes]
    responded = [rng.integers(0, 2, (size, 3), dtype=np.uint8) for size in sizes]
    for epoch, (step, answered) in enumerate(zip(steps, responded)):
        run.append_steps(np.full(len(step), epoch), step, step * 0.5)
        run.append_group("stragglers", dict(responded=answered, step_time=None))
        run.append_epoch(epoch_record(epoch))
    writer.close()
    with h5py.File(path, "r") as f:
        group = f["runs/rr/seed_0"]
        np.testing.assert_array_equal(group["steps/step"][()], np.concatenate(steps))
        np.testing.assert_array_equal(group["steps/loss"][()], np.concatenate(steps) * 0.5)
        np.testing.assert_array_equal(group["stragglers/responded"][()], np.concatenate(responded))
        assert group["stragglers/responded"].dtype == np.uint8 and "step_time" not in group["stragglers"]
        assert group["steps/step"].chunks == (MAX_CHUNK_ROWS,)
        # the last chunk holds 5 rows; past them the file has HDF5's fill value, as H5Dwrite leaves
        _, raw = group["steps/step"].id.read_direct_chunk((4 * MAX_CHUNK_ROWS,))
        np.testing.assert_array_equal(np.frombuffer(raw, dtype=np.int64)[5:], 0)
        np.testing.assert_array_equal(group["epoch"][()], np.arange(len(sizes)))
        np.testing.assert_array_equal(group["train_loss"][()], [1.0 / (e + 1) for e in range(len(sizes))])
        assert "test_loss" not in group  # None: not applicable, never created
        assert group.attrs["epochs_completed"] == len(sizes) - 1
        assert group.attrs["epochs_completed"].dtype == np.int64


def test_a_run_resumed_in_the_middle_of_a_chunk_keeps_the_rows_before_the_cut(tmp_path):
    """A resumed writer rewrites the chunk the cut fell in whole: the rows before the cut must be
    read back into it first, and the rows after the cut (dropped) must not come back."""
    path = str(tmp_path / "t.h5")
    orders = np.arange(7 * 2 * 5).reshape(7, 2, 5)
    writer = TraceWriter(path, {"config": "{}"})
    run = writer.start_run("cd-grab", 3, {}, appends=7)  # one chunk of 7 rows for every dataset
    for epoch in range(5):
        run.append_epoch(epoch_record(epoch))
        run.append_orders(orders[epoch])
    writer.file.close()  # as a killed job leaves it (no end_time)

    writer = TraceWriter.reopen(path, [], ("cd-grab", 3), dict(epoch=3, train_loss=3, wall_time=3, orders=3),
                                dict(time="t1", git_commit="abc"))
    run = writer.run("cd-grab", 3, appends=7)
    assert run.group.attrs["epochs_completed"] == 2
    for epoch in range(3, 7):
        run.append_epoch(epoch_record(10 * epoch))  # other values than the dropped rows had
        run.append_orders(orders[epoch] + 1000)
    writer.close()
    with h5py.File(path, "r") as f:
        group = f["runs/cd-grab/seed_3"]
        assert group["epoch"].chunks == (7,)
        np.testing.assert_array_equal(group["epoch"][()], [0, 1, 2, 30, 40, 50, 60])
        np.testing.assert_array_equal(group["wall_time"][()], [0, 0.5, 1, 15, 20, 25, 30])
        np.testing.assert_array_equal(group["orders"][()], np.concatenate([orders[:3], orders[3:] + 1000]))
        assert group.attrs["epochs_completed"] == 60
        assert json.loads(f.attrs["resumes"]) == [dict(time="t1", git_commit="abc")]


def test_a_run_that_finished_after_the_checkpoint_is_interrupted_again_once_cut_back(tmp_path):
    """A job killed after a run finished but before the next checkpoint: --resume cuts that run
    back to the (earlier, periodic) checkpoint, and until it finishes again the trace must say
    `interrupted`, or a second kill leaves a run marked `completed` that lacks its last epochs."""
    path = str(tmp_path / "t.h5")
    writer = TraceWriter(path, {"config": "{}"})
    run = writer.start_run("rr", 0, {}, appends=6)
    for epoch in range(6):
        run.append_epoch(epoch_record(epoch))
    run.finish("completed")
    writer.file.close()  # killed in the next run, before its first checkpoint
    writer = TraceWriter.reopen(path, [], ("rr", 0), dict(epoch=4, train_loss=4, wall_time=4), dict(time="t1"))
    writer.file.close()  # killed again, before the cut-back run finished
    with h5py.File(path, "r") as f:
        group = f["runs/rr/seed_0"]
        assert group.attrs["epochs_completed"] == 3
        assert group.attrs["status"] == "interrupted"
