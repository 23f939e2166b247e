"""What writing a measured epoch to the trace costs, next to plain h5py (issue #23).

    python benchmarks/bench_trace.py

The trace is flushed after every measured epoch, so that a killed job leaves every completed
epoch (docs/trace-format.md); an epoch of the default experiment trains in about a millisecond, so
what the write costs shows in the wall time of short runs. Timed here, in fresh files in a
temporary directory, best of 5 rounds of 300 epochs each, the variants alternating:

- "writer": ordersim.trace's RunTrace.append_epoch of a 16-dataset record (the default
  experiment's: ordersim.trace_schema's first 16 per-epoch datasets), with its flush, the update
  of epochs_completed and the reservation of the next rows' disk space;
- "h5py": the same 16 rows appended with h5py's Dataset.resize and slice assignment, the attribute
  set through Group.attrs and the file flushed twice (before and after the attribute, as the
  writer does): what a straightforward writer costs.

Prints microseconds per epoch and the baseline over the writer. To compare two versions of the
writer, run the script in each checkout (the writer variant imports the checkout's ordersim).

This is a script: it prints and never asserts (pytest does not collect it).
"""

import os
import tempfile
import time

import h5py
import numpy as np

from ordersim.trace import TraceWriter
from ordersim.trace_schema import epoch_datasets

NAMES = [entry.name for entry in epoch_datasets()][:16]
EPOCHS, ROUNDS = 300, 5


def record(epoch: int) -> dict:
    return {name: float(epoch) for name in NAMES} | {"epoch": epoch}


def writer_epochs(path: str) -> float:
    writer = TraceWriter(path, {"config": "{}"})
    run = writer.start_run("rr", 0, {}, appends=EPOCHS)
    start = time.perf_counter()
    for epoch in range(EPOCHS):
        run.append_epoch(record(epoch))
    seconds = time.perf_counter() - start
    writer.close()
    return seconds


def h5py_epochs(path: str) -> float:
    with h5py.File(path, "w") as f:
        group = f.create_group("runs/rr/seed_0")
        group.attrs["epochs_completed"] = 0
        data = {name: group.create_dataset(name, shape=(0,), maxshape=(None,), dtype="f8",
                                           chunks=(EPOCHS,)) for name in NAMES}
        start = time.perf_counter()
        for epoch in range(EPOCHS):
            for name, value in record(epoch).items():
                data[name].resize((epoch + 1,))
                data[name][epoch] = value
            f.flush()
            group.attrs["epochs_completed"] = epoch
            f.flush()
        return time.perf_counter() - start


def main() -> None:
    variants = dict(writer=writer_epochs, h5py=h5py_epochs)
    best = dict.fromkeys(variants, float("inf"))
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(ROUNDS):
            for name, epochs in variants.items():
                path = os.path.join(workdir, f"{name}-{round_}.h5")
                best[name] = min(best[name], epochs(path) / EPOCHS)
    print(f"one measured epoch of {len(NAMES)} datasets, flushed (best of {ROUNDS} x {EPOCHS} epochs):")
    for name, seconds in best.items():
        print(f"  {name:<7} {seconds * 1e6:7.0f} us   {seconds / best['writer']:5.2f} x writer")


if __name__ == "__main__":
    main()
