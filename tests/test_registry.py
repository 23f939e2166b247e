"""ordersim.registry: built-ins, entry points of installed packages (a real *.dist-info on the
path) and .py files by path, and the one-line errors of each; with a registry of its own, so that
the real ones stay as they are."""

import sys

import pytest

from ordersim.registry import PluginError, Registry


class Thing:
    name = ""
    description = ""


class Round(Thing):
    name = "round"
    description = "a built-in"


def things(group="ordersim_test.things"):
    return Registry("thing", group, lambda: [Round], lambda: Thing)


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A function that installs a package `thing_plugin` whose module holds `source` and whose
    entry points (group ordersim_test.things) are `points` (name = module:attribute)."""

    def install(source: str, points: dict, name="thing_plugin"):
        site = tmp_path / name
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(source)
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("[ordersim_test.things]\n" + "".join(
            f"{point} = {name}:{target}\n" for point, target in points.items()))
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, name, raising=False)

    return install


PLUGIN = f"from {__name__} import Thing\n\nclass Square(Thing):\n    name = 'square'\n    description = 'installed'\n"


def test_built_ins_then_entry_points_and_unknown_names(installed):
    installed(PLUGIN, {"square": "Square"})
    registry = things()
    assert list(registry) == ["round", "square"]
    assert registry.descriptions() == {"round": "a built-in", "square": "installed"}
    assert registry.get_class("square").__module__ == "thing_plugin"
    with pytest.raises(ValueError, match=r"^unknown thing 'oval'; known things: round, square \(or a path to a "
                                         r"\.py file\)$"):
        registry.get_class("oval")
    assert list(things("ordersim_test.none")) == ["round"]  # another group: no entry points


@pytest.mark.parametrize("source, points, message", [
    ("raise ImportError('no such helper')", {"square": "Square"},
     r"entry point 'square' of group 'ordersim_test.things' \(thing_plugin:Square\) failed to load: "
     r"ImportError: no such helper"),
    ("Square = 3", {"square": "Square"}, r"\(thing_plugin:Square\) is not a subclass of .*Thing with a name"),
    (PLUGIN, {"cube": "Square"}, r"entry point 'cube' .* names the thing 'square'; the two names must agree"),
    (PLUGIN.replace("'square'", "'round'"), {"round": "Square"}, r"two things are named 'round'"),
])
def test_a_broken_entry_point_is_one_line(installed, source, points, message):
    installed(source, points)
    with pytest.raises(PluginError, match=message) as info:
        list(things())
    assert "\n" not in str(info.value)


def test_a_file_by_path_is_found_by_its_name_from_then_on(tmp_path):
    registry = things()
    path = tmp_path / "oval.py"
    path.write_text(f"from {__name__} import Thing\n\nclass Oval(Thing):\n    name = 'oval'\n")
    cls = registry.get_class(str(path))
    assert cls.name == "oval" and registry.get_class("oval") is cls and list(registry) == ["round"]
    assert registry.get_class(str(path)) is cls  # imported once
    clash = tmp_path / "round.py"
    clash.write_text(f"from {__name__} import Thing\n\nclass Fake(Thing):\n    name = 'round'\n")
    with pytest.raises(ValueError, match=r"thing file '.*round.py' defines 'round', the name of a registered thing"):
        registry.get_class(str(clash))
    with pytest.raises(ValueError, match=r"thing file 'missing.py' does not exist"):
        registry.get_class("missing.py")
    with pytest.raises(ValueError, match=r"thing file '.*empty.py' must define exactly one subclass"):
        (tmp_path / "empty.py").write_text("")
        registry.get_class(str(tmp_path / "empty.py"))
    with pytest.raises(ValueError, match="unknown thing 'oval'"):
        things().get_class("oval")  # files are the registry's own, not every registry's


def test_listing_with_a_broken_installed_plug_in_is_one_line_exit_2(tmp_path):
    import os
    import subprocess

    from conftest import ROOT

    site = tmp_path / "site"
    info = site / "broken-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ordersim.orderers]\nghost = no_such_module:Ghost\n")
    result = subprocess.run([sys.executable, "-m", "ordersim", "orderers"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)])),
                            timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "ordersim: error: entry point 'ghost' of group 'ordersim.orderers' (no_such_module:Ghost) failed "
        "to load: ModuleNotFoundError: No module named 'no_such_module'"]


@pytest.mark.parametrize("args, message", [
    (["--stragglers", "nope"], "config field 'stragglers': 'nope' is not allowed; allowed: '' (off), constant, "
                               "shifted-exp, persistent, bernoulli, bursty, trace, or a path to a .py file"),
    (["--stragglers", "shifted-exp", "--straggler-options", '{"mu": -1}'],
     "config field 'straggler_options': mu must be a finite number > 0, got -1"),
    (["--stragglers", "trace", "--straggler-options", '{"path": "no/such/times.csv"}'],
     "config field 'straggler_options': "),  # numpy's words for the missing file
    (["--stragglers", "shifted-exp", "--coding", "gc-fr", "--coding-s", "3", "--workers", "6"],
     "config field 'coding_s': fractional repetition needs (s+1) | workers, got workers=6, s=3"),
    (["--coding", "gc-cr"], "config field 'stragglers': coding 'gc-cr' needs a straggler model to decide who "
                            "responds; set stragglers to one of constant, shifted-exp, persistent, bernoulli, "
                            "bursty, trace"),
    (["--coding", "gc-xx"], "config field 'coding': 'gc-xx' is not allowed; allowed: wait-all, "),
    (["--orderers", "rr", "no/such/orderer.py"],
     "config field 'orderers': orderer file 'no/such/orderer.py' does not exist (an orderer is a registered "
     "name or a path to a .py file)"),
    (["--data", "no/such/source.py:12"], "config field 'data': data source file 'no/such/source.py' does not exist"),
])
def test_plug_in_fields_are_one_line_config_errors(args, message, tmp_path, capsys):
    from ordersim.runner import main

    assert main([*args, "--epochs", "1", "--out", str(tmp_path / "x.h5")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"ordersim: error: {message}"), err


def test_problems_listing_shows_every_data_source_once_with_its_spec(capsys):
    from ordersim import listing
    from ordersim.data import DATA_SOURCES

    assert listing.problems([]) == 0
    data_lines = capsys.readouterr().out.split("data sets", 1)[1].splitlines()
    specs = [line.split()[0] for line in data_lines[1:] if line.strip()]
    for name, cls in DATA_SOURCES.items():
        assert any(spec.startswith(name + ":") for spec in specs), name
        if cls.reads_file:  # a file source's spec takes a path
            assert f"{name}:PATH" in specs, name
    assert "sklearn:breast_cancer" in specs and len(specs) == len(set(specs))


def test_the_measurement_registry_and_its_checks():
    """The built-in measurements are the public modules of ordersim/measurements/, each with a
    declaration the trace takes; a measurement's values are numbers (or None) of its declared
    datasets, anything else is named in one phrase."""
    import numpy as np

    from ordersim.measurements import MEASUREMENTS, run_measurements
    from ordersim.measurements.base import declaration_error, values_error
    from ordersim.trace_schema import Dataset

    assert list(MEASUREMENTS) == ["dist-to-opt", "held-out", "suboptimality"]
    assert all(cls.default and declaration_error(cls) is None for cls in MEASUREMENTS.values())
    assert run_measurements(["held-out"]) == list(MEASUREMENTS.values())  # a default one named again: once
    cls = MEASUREMENTS["held-out"]
    for values in ({}, {"test_loss": 1.0, "test_accuracy": None}, {"test_loss": np.float64(2)},
                   {"test_loss": np.int64(3)}, {"test_loss": np.array(4.0)}):
        assert values_error(cls, values) is None, values
    for values, phrase in (([1.0], "returned a list; allowed: a dict"),
                           ({"test_loss": np.zeros((1,))}, "returned ndarray of shape (1,) for 'test_loss'"),
                           ({"test_loss": "1"}, "returned str of shape () for 'test_loss'"),
                           ({"loss": 1.0}, "returned the dataset 'loss', which it does not declare")):
        assert phrase in values_error(cls, values)

    class Matrix(cls):
        datasets = (Dataset("m", "float64", "(T, d)", "", ""),)

    assert declaration_error(Matrix) == ("declares 'm' as float64 (T, d); allowed: float64 or int64 (T,), "
                                         "one number per measured epoch")
