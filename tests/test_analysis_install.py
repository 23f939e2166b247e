"""The analysis after the README's install, without the `analysis` or `xarray` extra: one line
naming the missing package and the extra to install (exit 2), worded as `python -m ordersim merge`
words it, not a ModuleNotFoundError traceback."""

import sys
import tomllib

import pytest

from conftest import ROOT
from ordersim.analysis import extras
from test_install import python

SCRIPTS = ("convergence", "fit", "herding", "herding_sim", "scaling", "stragglers")


def without(package: str, run: str) -> str:
    """Python code that runs ``run`` as if ``package`` were not installed (a None entry in
    sys.modules makes `import package` raise ImportError, as test_install does)."""
    return f"import runpy, sys; sys.modules[{package!r}] = None\n{run}\n"


@pytest.mark.parametrize("script, package", [*((s, "matplotlib") for s in SCRIPTS), ("convergence", "pandas")])
def test_an_analysis_command_without_its_extra_says_what_to_install_in_one_line(tmp_path, script, package):
    module = f"ordersim.analysis.{script}"
    run = f"sys.argv = [{module!r}, 'x.h5', '--out', 'figures']\n" \
          f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    result = python(without(package, run), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"python -m {module}: error: {script} needs {package}, from the analysis "
                                          "extra: pip install 'ordersim[analysis]'"]


def test_reproduce_without_the_analysis_extra_says_what_to_install_in_one_line(tmp_path):
    result = python(without("matplotlib", "import ordersim.cli; sys.argv = ['ordersim', 'reproduce', '--no-run']\n"
                                          "raise SystemExit(ordersim.cli.main())"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["python -m ordersim reproduce: error: reproduce needs matplotlib, from the "
                                          "analysis extra: pip install 'ordersim[analysis]'"]


def test_importing_an_analysis_script_or_calling_to_xarray_without_its_extra_names_it(tmp_path, monkeypatch):
    imported = python(without("matplotlib", "import ordersim.analysis.convergence"), cwd=tmp_path)
    assert imported.stderr.splitlines()[-1] == (
        "ordersim.analysis.extras.MissingExtra: ordersim.analysis.convergence needs matplotlib, from the analysis "
        "extra: pip install 'ordersim[analysis]'")
    from ordersim.analysis import to_xarray

    monkeypatch.setitem(sys.modules, "xarray", None)
    with pytest.raises(ModuleNotFoundError) as missing:
        to_xarray(["x.h5"])
    assert str(missing.value) == "to_xarray needs xarray, from the xarray extra: pip install 'ordersim[xarray]'"


def test_the_analysis_words_a_missing_extra_as_merge_does(monkeypatch, capsys):
    from ordersim.sweep import merge_main

    monkeypatch.setitem(sys.modules, "pandas", None)
    assert merge_main(["x.h5", "--out", "y.csv"]) == 2
    merge = capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        extras.require_or_exit("ordersim", "merge", "analysis", ["pandas"])
    assert stop.value.code == 2 and capsys.readouterr().err == merge


def test_the_extras_are_pyprojects():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra, packages in extras.EXTRAS.items():
        names = {requirement.split(">")[0].split("=")[0].split("[")[0].strip() for requirement in declared[extra]}
        assert set(packages) <= names, (extra, packages, names)
