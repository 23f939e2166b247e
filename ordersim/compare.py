"""`python -m ordersim compare A.h5 B.h5`: do two run traces hold the same results bit for bit?

The project promises that the same config and seed give bitwise-identical traces whatever the
number of ranks (and that a plug-in orderer's run under `mpiexec -n 2` gives the serial run's
trace). This checks it on two trace files (layout: docs/trace-format.md):

- the set of runs (/runs/<orderer>/seed_<s>) of both files;
- in every run in both, every dataset (its dtype, shape and raw bytes: NaNs at the same places
  compare equal, -0.0 and 0.0 do not) and every attribute (of the run's group and of the objects
  below it), except the timings: the datasets of TIMING_DATASETS and the attribute of
  TIMING_ATTRIBUTES, which measure the machine, not the computation;
- the root's datasets (shards, x_star) and their attributes.

The root's own attributes describe the job (its times, hosts, ranks, backend, command line, code
state, resumes, ...) and differ between two runs of the same experiment: they are not compared,
and the output says so.

Exit status: 0 identical, 1 different (one line per difference, at most --limit of them, then a
summary line), 2 a file that is missing or not an ordersim run trace (one line, no traceback).
"""

import sys

from ordersim.cli import counted

# The trace's timing datasets (per epoch, in every run) and run attributes: wall-clock seconds,
# different at every run. ordersim/trace_schema.py has no flag for them (its `_time` names include
# the simulated, deterministic sim_time), so this is their one list; the tests' TIMING is this.
TIMING_DATASETS = ("wall_time", "train_time", "compute_time", "order_time", "comm_time", "measure_time")
TIMING_ATTRIBUTES = ("compile_time",)
TIMING = frozenset(TIMING_DATASETS + TIMING_ATTRIBUTES)

DEFAULT_LIMIT = 20
BLOCK_BYTES = 1 << 24  # a dataset is read in blocks of rows of about this size from each file
VALUE_CHARS = 80  # an attribute's value is shown up to this many characters

NOT_COMPARED = f"not compared: timings {', '.join(TIMING_DATASETS + TIMING_ATTRIBUTES)} and the root's job attributes"
EXPECTED = "expected an ordersim run trace (the HDF5 file `python -m ordersim ... --out FILE` writes)"


class CompareError(Exception):
    """A file that cannot be compared; the message names it and says why."""


def _runs(f) -> dict:
    """The runs of an open trace: "orderer/seed_<s>" -> its group."""
    import h5py

    runs = f.get("runs")
    if not isinstance(runs, h5py.Group):
        return {}
    return {f"{orderer}/{seed}": run for orderer, seeds in runs.items() if isinstance(seeds, h5py.Group)
            for seed, run in seeds.items() if isinstance(run, h5py.Group)}


def _members(group, skip_top: frozenset = frozenset()) -> tuple[dict, dict]:
    """The datasets and the groups below `group` (paths relative to it), leaving out the top-level
    names `skip_top` and everything below them."""
    import h5py

    datasets, groups = {}, {}

    def visit(name, obj):  # returns None: h5py stops at the first other value
        if name.split("/")[0] in skip_top:
            return
        (datasets if isinstance(obj, h5py.Dataset) else groups)[name] = obj

    group.visititems(visit)
    return datasets, groups


def _read(obj, selection, path: str):
    try:
        return obj[selection]
    except (OSError, ValueError, TypeError) as err:
        raise CompareError(f"{path!r}: cannot read {obj.name} ({err})") from None


def _attributes(obj, path: str) -> dict:
    try:
        return dict(obj.attrs.items())
    except (OSError, ValueError, TypeError) as err:
        raise CompareError(f"{path!r}: cannot read the attributes of {obj.name} ({err})") from None


def _same(x, y) -> bool:
    """Bitwise equality of two attribute values (numpy scalars and arrays by dtype, shape and
    bytes; strings and the rest by type and ==)."""
    import numpy as np

    if type(x) is not type(y):
        return False
    if isinstance(x, (np.ndarray, np.generic)):
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.dtype.hasobject:
            return all(_same(p, q) for p, q in zip(x.ravel().tolist(), y.ravel().tolist()))
        return x.tobytes() == y.tobytes()
    try:
        return bool(x == y)
    except ValueError:  # an object whose == is elementwise
        return False


def _shown(value) -> str:
    import numpy as np

    if isinstance(value, np.generic):
        value = value.item()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    text = repr(value)
    return text if len(text) <= VALUE_CHARS else text[:VALUE_CHARS - 3] + "..."


def _pair(x, y) -> tuple[str, str]:
    """How two differing values are shown: their values, or where those read the same (0.0 and
    -0.0 do not; NaNs with other payloads, an int64 and an int32 3 do) their types and bytes too."""
    import numpy as np

    a, b = _shown(x), _shown(y)
    if a == b:
        def typed(v):
            if isinstance(v, (np.ndarray, np.generic)):
                return f"{_shown(v)} ({np.asarray(v).dtype}, bytes {np.asarray(v).tobytes().hex()})"
            return f"{_shown(v)} ({type(v).__name__})"
        a, b = typed(x), typed(y)
    return a, b


def _differing_values(a, b, path_a: str, path_b: str) -> tuple[int, tuple | None, object, object]:
    """Two datasets of the same dtype and shape: how many elements differ in their bytes, the
    index of the first and both values there."""
    import numpy as np

    shape, dtype = a.shape, a.dtype
    if shape is None or a.size == 0:  # an empty dataspace, or no elements
        return 0, None, None, None
    if shape == ():
        blocks = [((), None)]
    else:
        row_bytes = max(1, dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
        rows = max(1, BLOCK_BYTES // row_bytes)
        blocks = [(slice(start, min(start + rows, shape[0])), start) for start in range(0, shape[0], rows)]
    count, first = 0, None
    for selection, start in blocks:
        x = np.asarray(_read(a, selection, path_a))
        y = np.asarray(_read(b, selection, path_b))
        if dtype.hasobject:  # variable-length strings or references: compare the objects
            mask = np.array([not _same(p, q) for p, q in zip(x.ravel().tolist(), y.ravel().tolist())],
                            dtype=bool).reshape(x.shape)
        else:
            bx = np.ascontiguousarray(x).reshape(-1).view(np.uint8).reshape(x.size, -1)
            by = np.ascontiguousarray(y).reshape(-1).view(np.uint8).reshape(y.size, -1)
            mask = (bx != by).any(axis=1).reshape(x.shape)
        found = int(np.count_nonzero(mask))
        if found and first is None:
            local = np.unravel_index(int(np.flatnonzero(mask)[0]), x.shape)
            first = (x[local], y[local], tuple(int(i) for i in local))
            if start is not None:
                first = (*first[:2], (first[2][0] + start, *first[2][1:]))
        count += found
    if first is None:
        return 0, None, None, None
    return count, first[2], first[0], first[1]


class Comparison:
    """The differences between the traces at `path_a` and `path_b`, and how much was compared."""

    def __init__(self, path_a: str, path_b: str):
        self.paths = (path_a, path_b)
        self.differences: list[str] = []
        self.datasets = 0
        self.attributes = 0
        self.common_runs = 0
        self.differing_runs: set[str] = set()
        self.only = ([], [])  # the runs only in A, only in B
        self.root_differences = 0

    def _differ(self, line: str, run: str | None) -> None:
        self.differences.append(line)
        if run is None:
            self.root_differences += 1
        else:
            self.differing_runs.add(run)

    def _only(self, where: str, what: str, present: int, run: str | None) -> None:
        self._differ(f"{where}: {what} only in {self.paths[present]}", run)

    def attributes_of(self, a, b, where: str, run: str | None, skip: frozenset = frozenset()) -> None:
        attrs_a = {k: v for k, v in _attributes(a, self.paths[0]).items() if k not in skip}
        attrs_b = {k: v for k, v in _attributes(b, self.paths[1]).items() if k not in skip}
        for name in sorted(attrs_a.keys() | attrs_b.keys()):
            if name not in attrs_b or name not in attrs_a:
                self._only(where, f"attribute {name}", 0 if name in attrs_a else 1, run)
                continue
            self.attributes += 1
            if not _same(attrs_a[name], attrs_b[name]):
                x, y = _pair(attrs_a[name], attrs_b[name])
                self._differ(f"{where}: attribute {name}: {x} in {self.paths[0]}, {y} in {self.paths[1]}", run)

    def dataset(self, a, b, where: str, run: str | None) -> None:
        self.datasets += 1
        path_a, path_b = self.paths
        if a.dtype != b.dtype:
            self._differ(f"{where}: dtype {a.dtype} in {path_a}, {b.dtype} in {path_b}", run)
        elif a.shape != b.shape:
            self._differ(f"{where}: shape {a.shape} in {path_a}, {b.shape} in {path_b}", run)
        else:
            count, index, x, y = _differing_values(a, b, path_a, path_b)
            if count:
                shown_a, shown_b = _pair(x, y)
                at = f"[{', '.join(map(str, index))}]" if index else "(the scalar)"
                self._differ(f"{where}: values differ at {count} of {a.size} positions, first at {at}: "
                             f"{shown_a} in {path_a}, {shown_b} in {path_b}", run)
        self.attributes_of(a, b, where, run)

    def members(self, a, b, prefix: str, run: str | None, skip_top: frozenset) -> None:
        """The datasets and subgroups below groups `a` and `b` (their attributes included)."""
        datasets_a, groups_a = _members(a, skip_top)
        datasets_b, groups_b = _members(b, skip_top)
        for name in sorted(datasets_a.keys() | datasets_b.keys()):
            where = f"{prefix}/{name}"
            if name in datasets_a and name in datasets_b:
                self.dataset(datasets_a[name], datasets_b[name], where, run)
            elif name in groups_a or name in groups_b:
                self._differ(f"{where}: a dataset in {self.paths[0 if name in datasets_a else 1]}, "
                             f"a group in {self.paths[1 if name in datasets_a else 0]}", run)
            else:
                self._only(where, "dataset", 0 if name in datasets_a else 1, run)
        for name in sorted(groups_a.keys() & groups_b.keys()):
            self.attributes_of(groups_a[name], groups_b[name], f"{prefix}/{name}", run)

    def files(self, a, b) -> None:
        runs_a, runs_b = _runs(a), _runs(b)
        for name in sorted(runs_a.keys() | runs_b.keys()):
            where = f"/runs/{name}"
            if name not in runs_a or name not in runs_b:
                side = 0 if name in runs_a else 1
                self.differences.append(f"{where}: run only in {self.paths[side]}")
                self.only[side].append(name)
                continue
            self.common_runs += 1
            self.attributes_of(runs_a[name], runs_b[name], where, name, skip=frozenset(TIMING_ATTRIBUTES))
            self.members(runs_a[name], runs_b[name], where, name, skip_top=frozenset(TIMING_DATASETS))
        self.members(a, b, "", None, skip_top=frozenset({"runs"}))

    def summary(self) -> str:
        if not self.differences:
            return (f"identical: {counted(self.common_runs, 'run')}, {counted(self.datasets, 'dataset')} and "
                    f"{counted(self.attributes, 'attribute')} bit for bit ({NOT_COMPARED})")
        parts = [f"{len(self.differing_runs)} of the {counted(self.common_runs, 'run')} in both files "
                 f"{'differs' if len(self.differing_runs) == 1 else 'differ'}"]
        for side, names in enumerate(self.only):
            if names:
                parts.append(f"{counted(len(names), 'run')} only in {self.paths[side]}")
        if self.root_differences:
            parts.append(f"{counted(self.root_differences, 'difference')} in the root's datasets")
        return (f"different: {counted(len(self.differences), 'difference')}: {'; '.join(parts)} "
                f"(compared {counted(self.datasets, 'dataset')} and {counted(self.attributes, 'attribute')}; "
                f"{NOT_COMPARED})")


def compare(path_a: str, path_b: str) -> Comparison:
    """The comparison of two run traces; CompareError naming the file that is not one."""
    import h5py

    from ordersim.trace import NotATrace, trace_root

    for path in (path_a, path_b):
        try:
            trace_root(path)
        except NotATrace as why:
            raise CompareError(f"{path!r} {why}; {EXPECTED}") from None
    comparison = Comparison(path_a, path_b)
    try:
        with h5py.File(path_a, "r") as a, h5py.File(path_b, "r") as b:
            comparison.files(a, b)
    except OSError as err:  # opened a moment ago by trace_root: changed or locked since
        raise CompareError(f"{path_a!r} or {path_b!r} could not be read ({err})") from None
    return comparison


def main(argv: list[str]) -> int:
    from ordersim.config import OneLineParser

    p = OneLineParser(
        prog="python -m ordersim compare",
        usage="python -m ordersim compare [-h] [--limit N] A.h5 B.h5",
        description="Tell whether two run traces hold the same results bit for bit, as the same "
                    "config and seed must give whatever the number of ranks (serial vs mpiexec -n 2, "
                    "4, ...). Compared: the set of runs; in every run in both files, every dataset "
                    "(dtype, shape and raw bytes: NaNs at the same places are equal, -0.0 and 0.0 are "
                    "not) and every attribute, except the timings (datasets "
                    f"{', '.join(TIMING_DATASETS)}; run attribute {', '.join(TIMING_ATTRIBUTES)}); the "
                    "root's datasets (shards, x_star). Not compared: the root's attributes, which "
                    "describe the job (times, hosts, ranks, backend, command line, code state, "
                    "resumes, ...). Exit status: 0 identical (one line with what was compared), 1 "
                    "different (one line per difference, then a summary line), 2 a file that is "
                    "missing or not an ordersim run trace.")
    p.add_argument("a", nargs="?", metavar="A.h5", help="a run trace (HDF5, written by python -m ordersim)")
    p.add_argument("b", nargs="?", metavar="B.h5", help="the run trace to compare it with")
    p.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                   help=f"print at most N differences, then '... and K more' (default {DEFAULT_LIMIT}; "
                        "0 prints them all); the summary line counts them all")
    args = p.parse_args(argv)
    if args.b is None:  # both optional to argparse, so that an unknown option is the error it reports
        p.error("the following arguments are required: A.h5, B.h5")
    if args.limit < 0:
        p.error(f"argument --limit: {args.limit} is negative; allowed: 0 (all) or more")
    try:
        comparison = compare(args.a, args.b)
    except CompareError as err:
        print(f"ordersim compare: error: {err}", file=sys.stderr)
        return 2
    shown = comparison.differences if args.limit == 0 else comparison.differences[:args.limit]
    for line in shown:
        print(line)
    if len(comparison.differences) > len(shown):
        print(f"... and {len(comparison.differences) - len(shown)} more")
    print(comparison.summary())
    return 1 if comparison.differences else 0
