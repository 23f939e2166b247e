"""ordersim/provenance.py: what a trace records of the code and the command that made it."""

import hashlib
import json
import shlex
import subprocess
import sys

import h5py


def test_a_trace_records_a_rerunnable_command_its_directory_and_its_plug_in_files(tmp_path):
    """A problem given by a relative path: the trace holds the command as it can be run again (the
    interpreter's full path, -m ordersim, the arguments), the directory those paths are relative
    to, and the file's absolute path with the SHA-256 of its contents."""
    plug_in = tmp_path / "mine.py"
    plug_in.write_text("from ordersim.problems.least_squares import LeastSquares\n\n\n"
                       "class Mine(LeastSquares):\n    name = 'mine'\n")
    args = ["--problem", "./mine.py", "--data", "synthetic:regression?n=200&d=4", "--epochs", "1",
            "--orderers", "rr", "--seeds", "0", "--quiet", "--out", "run.h5"]
    result = subprocess.run([sys.executable, "-m", "ordersim", *args], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    with h5py.File(tmp_path / "run.h5", "r") as f:
        assert shlex.split(f.attrs["command_line"]) == [sys.executable, "-m", "ordersim", *args]
        assert f.attrs["working_directory"] == str(tmp_path.resolve())
        assert json.loads(f.attrs["plugin_files"]) == {
            str(plug_in.resolve()): hashlib.sha256(plug_in.read_bytes()).hexdigest()}
