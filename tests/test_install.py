"""The installed names: a user's own folders cannot shadow ordersim's, and the core runs without
the optional extras."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def python(code_or_args, cwd, env=None):
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env=env)


def test_a_users_problems_and_analysis_folders_do_not_shadow_ordersims(tmp_path):
    for folder in ("problems", "analysis"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(f"raise SystemExit('the user\\'s {folder} was imported')\n")
    listed = python(["-m", "ordersim", "problems"], cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "logistic" in listed.stdout
    loaded = python("import ordersim.analysis.load, ordersim.problems.logistic; "
                    "print(ordersim.problems.__file__)", cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == str(ROOT / "problems" / "__init__.py")


@pytest.mark.parametrize("extra", ["pandas", "matplotlib", "torch"])
def test_the_core_imports_nothing_from_an_optional_extra(tmp_path, extra):
    # A None entry in sys.modules makes `import extra` raise ImportError, as if it were not installed.
    code = (f"import sys; sys.modules[{extra!r}] = None\n"
            "import ordersim.cli, ordersim.simulate, ordersim.sweep, ordersim.runner, ordersim.problems\n"
            "import ordersim.herding_sim, ordersim.trace, ordersim.checkpoint, ordersim.listing\n"
            "sys.argv = ['ordersim', 'orderers']\n"
            "raise SystemExit(ordersim.cli.main())\n")
    result = python(code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "cd-grab" in result.stdout


def test_merge_without_pandas_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['pandas'] = None\n"
            "from ordersim.sweep import merge_main\n"
            "raise SystemExit(merge_main(['x.h5', '--out', 'y.csv']))\n")
    result = python(code, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == ("ordersim: error: merge needs pandas, from the analysis extra: "
                                     "pip install 'ordersim[analysis]'")


def test_a_second_checkouts_ordersim_says_it_runs_the_installed_checkouts_problems(tmp_path):
    """With PYTHONPATH at a second checkout, its ordersim imports but an editable install still maps
    ordersim.problems to the installed checkout's problems/: edits to the second checkout's
    problems went silently unused (docs/performance.md compares checkouts that way)."""
    import ordersim.problems

    if ordersim.problems.__file__ != str(ROOT / "problems" / "__init__.py"):
        pytest.skip("needs ordersim installed editable from this checkout (as README and CI install it)")
    second = tmp_path / "second"
    for folder in ("ordersim", "problems"):
        shutil.copytree(ROOT / folder, second / folder, ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(second))
    listed = python(["-m", "ordersim", "problems"], cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    [line] = listed.stderr.splitlines()
    assert line.startswith("ordersim: warning: ordersim.problems is") and str(second / "problems") in line, line
    assert f"pip install -e {second}" in line
    same = python(["-m", "ordersim", "problems"], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert same.returncode == 0 and same.stderr == "", same.stderr
