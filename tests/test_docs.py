"""The specification is part of the repository.

docs/algorithms.md defines what every orderer, metric, coding scheme and straggler model computes.
These tests fail when a tracked file refers to the spec (or anything else) by a path outside the
repository, which a clone would not have, and when something registered has no entry in the spec:
a new orderer without its section fails CI.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reference.orderers import REFERENCES

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs/algorithms.md"

# What the code registers, read with the JIT off: importing the orderer registry compiles every
# balancing kernel otherwise (about 15 s cold), and names need no machine code.
REGISTRY_SCRIPT = """
import json
from ordersim import coding, metrics, stragglers
from ordersim.orderers import available_orderers, orderer_class
print(json.dumps({
    "orderers": {name: orderer_class(name).__module__ for name in available_orderers()},
    "schemes": sorted(coding.SCHEMES),
    "straggler_models": sorted(stragglers.STRAGGLER_MODELS),
    "metrics": sorted(name for name in metrics.__all__ if callable(getattr(metrics, name))),
}))
"""

# A relative path that starts with one or more steps up to the parent directory.
CLIMBING_PATH = re.compile(r"(?<![\w.~/-])(?:\.\./)+[\w.-]+(?:/[\w.-]+)*")
# Any path naming the spec's file; only docs/algorithms.md (or the bare file name, from a page in
# docs/) is the repository's own.
SPEC_PATH = re.compile(r"[\w.~/-]*algorithms\.md")
# An absolute path into this machine's work directory, which a clone does not have.
MACHINE_PATH = re.compile(r"(?<![\w.-])/work(?=/)")


def tracked_files() -> list[Path]:
    """The repository's files: git's list, or (no git, e.g. an unpacked sdist) the tree without
    hidden directories, caches and build output."""
    try:
        listing = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                                 timeout=60).stdout
        return [ROOT / name for name in listing.decode().split("\0") if name]
    except (OSError, subprocess.SubprocessError):
        skip = {"__pycache__", "build", "dist"}
        return [path for path in ROOT.rglob("*") if path.is_file()
                and not any(part.startswith(".") or part in skip or part.endswith(".egg-info")
                            for part in path.relative_to(ROOT).parts[:-1])]


def text_files() -> list[tuple[Path, str]]:
    out = []
    for path in tracked_files():
        if not path.exists():  # deleted in the working tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" not in data:  # figures and other binaries
            out.append((path, data.decode("utf-8", errors="replace")))
    return out


def line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def test_no_tracked_file_points_outside_the_repository():
    problems = []
    for path, text in text_files():
        name = path.relative_to(ROOT).as_posix()

        def problem(match, what):
            problems.append(f"{name}:{line_of(text, match.start())}: {match.group()} {what}")

        for match in CLIMBING_PATH.finditer(text):
            # Markdown links are relative to the page and must reach a file of the repository; paths
            # in code and comments are written from the repository root, so there none may climb.
            target = (path.parent / match.group()).resolve()
            if path.suffix != ".md" or not (target.is_relative_to(ROOT) and target.exists()):
                problem(match, "is not a file of the repository")
        for match in SPEC_PATH.finditer(text):
            if match.group() != "docs/algorithms.md" and not (name.startswith("docs/") and match.group() == SPEC.name):
                problem(match, "is not the repository's spec; write docs/algorithms.md")
        for match in MACHINE_PATH.finditer(text):
            problem(match, "starts an absolute path of this machine")
    assert not problems, "\n".join(problems)


def test_the_path_patterns_find_references_out_of_the_repository():
    # assembled from pieces, so that this file holds no such reference itself
    up = "." * 2 + "/"
    relative, absolute = f"{up}elsewhere/{SPEC.name}", "/" + "work" + f"/elsewhere/{SPEC.name}"
    text = f"follow {relative}; written from {absolute} (see docs/algorithms.md)"
    assert CLIMBING_PATH.findall(text) == [relative]
    assert SPEC_PATH.findall(text) == [relative, absolute, "docs/algorithms.md"]
    assert MACHINE_PATH.search(text)


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_section_links_between_pages_reach_their_sections():
    """Links such as docs/algorithms.md#theory: the page must have that section."""
    broken = []
    for path, text in text_files():
        if path.suffix != ".md":
            continue
        for match in re.finditer(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            target = (path.parent / match.group(1)).resolve() if match.group(1) else path
            anchors = {heading_anchor(line.lstrip("#")) for line in target.read_text(encoding="utf-8").splitlines()
                       if line.startswith("#")} if target.is_file() else set()
            if match.group(2) not in anchors:
                broken.append(f"{path.relative_to(ROOT).as_posix()}:{line_of(text, match.start())}: "
                              f"{match.group(1) or path.name}#{match.group(2)}")
    assert not broken, "links to sections that do not exist:\n" + "\n".join(broken)


@pytest.fixture(scope="module")
def registry():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    result = subprocess.run([sys.executable, "-c", REGISTRY_SCRIPT], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def spec():
    assert SPEC.is_file(), "docs/algorithms.md, the specification, is missing"
    return SPEC.read_text(encoding="utf-8")


def orderer_sections(spec: str) -> dict[str, str]:
    """The '### `name`' sections of the spec's '## Orderers' chapter: name -> its text."""
    chapter = re.search(r"^## Orderers\n(.*?)(?=^## )", spec, flags=re.M | re.S)
    assert chapter, "docs/algorithms.md has no '## Orderers' chapter"
    parts = re.split(r"^### `([^`]+)`[ \t]*\n", chapter.group(1), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_registered_orderer_has_its_section_in_the_spec(registry, spec):
    sections = orderer_sections(spec)
    registered = set(registry["orderers"])
    missing, unknown = sorted(registered - set(sections)), sorted(set(sections) - registered)
    assert not missing, (f"no section '### `NAME`' under '## Orderers' in docs/algorithms.md for: "
                         f"{', '.join(missing)} (a new orderer needs its spec)")
    assert not unknown, f"docs/algorithms.md specifies orderers the registry does not have: {', '.join(unknown)}"


def test_every_orderer_section_names_its_paper_code_and_reference(registry, spec):
    sections = orderer_sections(spec)
    problems = []
    for name, module in sorted(registry["orderers"].items()):
        text = sections.get(name, "")
        path = module.replace(".", "/") + ".py"
        if path not in text:
            problems.append(f"{name}: its section does not name its module {path}")
        if name in REFERENCES and f"reference `{REFERENCES[name].__name__}`" not in text:
            problems.append(f"{name}: its section does not name its reference `{REFERENCES[name].__name__}`")
        if "arXiv" not in text:
            problems.append(f"{name}: its section gives no arXiv id (or says there is none)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("kind,form", [("schemes", "`{}`"), ("straggler_models", "`{}`"),
                                        ("metrics", "`{}(")])
def test_every_scheme_model_and_metric_is_in_the_spec(registry, spec, kind, form):
    missing = [name for name in registry[kind] if form.format(name) not in spec]
    assert not missing, f"docs/algorithms.md does not mention these {kind}: {', '.join(missing)}"


def test_the_trace_formats_tables_are_the_schemas():
    """docs/trace-format.md's dataset tables are generated from ordersim/trace_schema.py."""
    from ordersim import trace_schema

    text = (ROOT / "docs/trace-format.md").read_text(encoding="utf-8")
    assert text.count("<!-- schema:") == len(trace_schema.TABLES)
    assert trace_schema.generated(text) == text, "run `python -m ordersim.trace_schema`"
