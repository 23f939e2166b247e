"""ordersim/trace_schema.py against real traces and its users: every attribute a trace's file and
runs carry is a row of the attribute tables, the loader's columns are attributes of the schema,
the per-epoch table holds the built-in measurements' datasets, and the writer takes a dataset of
a measurement loaded from a file and refuses a name no table has."""

import h5py
import numpy as np
import pytest

from ordersim import trace_schema


def attribute_names(table) -> set[str]:
    return {name for entry in table for name in entry.each}


@pytest.fixture(scope="module")
def straggler_trace(tmp_path_factory):
    """A small run with a straggler model and a coding scheme on the constant schedule of a
    strongly convex problem: the run attributes of the clock and of the analyses' regime are
    there too."""
    from ordersim.runner import main

    path = tmp_path_factory.mktemp("schema") / "t.h5"
    assert main(["--orderers", "rr", "--seeds", "0", "--epochs", "1", "--workers", "4", "--quiet",
                 "--stragglers", "shifted-exp", "--coding", "gc-cr", "--coding-s", "1",
                 "--out", str(path)]) == 0
    return path


def test_every_attribute_of_a_trace_is_in_the_schema(straggler_trace):
    with h5py.File(straggler_trace, "r") as f:
        root = set(f.attrs)
        run = set(f["runs/rr/seed_0"].attrs)
    assert root - attribute_names(trace_schema.ROOT_ATTRIBUTES) == set()
    assert run - attribute_names(trace_schema.RUN_ATTRIBUTES) == set()
    assert {"straggler_model", "coding_s", "step_size", "in_regime"} <= run  # the conditional ones ran


def test_the_loaders_columns_are_attributes_of_the_schema():
    from ordersim.analysis.load import FILE_COLUMNS, RUN_COLUMNS

    assert set(FILE_COLUMNS) <= attribute_names(trace_schema.ROOT_ATTRIBUTES)
    assert set(RUN_COLUMNS) <= attribute_names(trace_schema.RUN_ATTRIBUTES)


def test_the_per_epoch_table_holds_the_built_in_measurements_once():
    from ordersim.measurements import builtin_measurements

    names = [entry.name for entry in trace_schema.PER_EPOCH]
    assert len(names) == len(set(names))
    declared = [entry.name for cls in builtin_measurements() for entry in cls.datasets]
    assert {"suboptimality", "dist_to_opt", "test_loss", "test_accuracy"} <= set(declared) <= set(names)
    assert all(entry.shape == "(T,)" for entry in trace_schema.PER_EPOCH)


def test_the_writer_takes_a_file_measurements_dataset_and_refuses_an_unknown_one(tmp_path):
    from ordersim.measurements import MEASUREMENTS
    from ordersim.trace import TraceWriter

    plug_in = tmp_path / "step_count.py"
    plug_in.write_text("from ordersim.measurements.base import Measurement\n"
                       "from ordersim.trace_schema import Dataset\n\n\n"
                       "class StepCount(Measurement):\n    name = 'step-count'\n"
                       "    datasets = (Dataset('steps_taken', 'int64', '(T,)', '', ''),)\n")
    with pytest.raises(KeyError, match="'steps_taken' is not a per-epoch dataset"):
        trace_schema.epoch_dtype("steps_taken")
    MEASUREMENTS.get_class(str(plug_in))
    assert trace_schema.epoch_dtype("steps_taken") == "int64"
    writer = TraceWriter(str(tmp_path / "t.h5"), {"config": "{}"})
    run = writer.start_run("rr", 0, {})
    run.append_epoch({"epoch": 0, "steps_taken": 7})
    with pytest.raises(KeyError, match="'no_such' is not a per-epoch dataset"):
        run.append_epoch({"epoch": 1, "no_such": 1.0})
    writer.close()
    with h5py.File(tmp_path / "t.h5", "r") as f:
        data = f["runs/rr/seed_0/steps_taken"]
        assert data.dtype == np.int64 and data[()].tolist() == [7]
