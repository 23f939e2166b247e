"""ordersim/dry_run.py: what --dry-run reports of the output a run would write."""

import subprocess
import sys


def test_dry_run_names_an_out_a_run_could_not_create_and_leaves_no_directory(tmp_path):
    """An --out in a directory that cannot be made is what a run refuses before any compute: the
    dry run says so; an --out in directories still to be made is fine, and the dry run makes none."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for out, refused in ((blocker / "sub" / "x.h5", True), (tmp_path / "new" / "deeper" / "x.h5", False)):
        result = subprocess.run([sys.executable, "-m", "ordersim", "--dry-run", "--epochs", "1", "--out", str(out)],
                                capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        line = next(line for line in result.stdout.splitlines() if line.startswith("the run: out"))
        assert (f"a run would refuse it: config field 'out': '{out}' is not writable" in line) == refused, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
