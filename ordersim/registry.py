"""One registry mechanism for every kind of plug-in: orderers, problems, data sources, straggler
models, coding schemes and measurements.

A registry maps names to classes that have a ``name`` and a one-line ``description``. It fills
itself on first use, from three places:

- the built-in classes (a function the owning module gives, called once);
- entry points of installed packages, group ``ordersim.<kind>s`` (``ordersim.orderers``,
  ``ordersim.problems``, ``ordersim.data_sources``, ``ordersim.straggler_models``,
  ``ordersim.coding_schemes``, ``ordersim.measurements``): each entry point names one class,
  under the entry point's name;
- a path to a ``.py`` file given where a name is expected (``--problem my_problem.py``): the file
  is imported and its one subclass of the kind's base class with a ``name`` is used.

Nothing is imported before the registry is first asked, and asking imports modules, never
compiles: kernels compile at first use (ordersim/declared_jit.py), so listing names is cheap. A
registry is a read-only mapping (name -> class: the built-ins in their order, then the entry
points by name), which the listings and the lists of allowed values show; a class loaded from a
file is not listed, but its name finds it from then on (`get_class`); an unknown name raises the
one-line ValueError "unknown orderer 'x'; known orderers: a, b, c".
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import entry_points
from pathlib import Path


class PluginError(ValueError):
    """An installed plug-in that cannot be used (its entry point fails to import, names no class
    of the kind, or a name twice); the message is the one line the user sees, as a config error
    of the field that asked (ordersim.config) or from the listings (ordersim.cli)."""


def is_path(name_or_path: str) -> bool:
    """Whether a command-line value names a .py file rather than a registered name."""
    return name_or_path.endswith(".py") or os.sep in name_or_path or "/" in name_or_path


def subclasses_in(module, base: type) -> list[type]:
    """The subclasses of ``base`` with a non-empty ``name`` that ``module`` itself defines."""
    return [cls for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, base) and cls is not base and cls.__module__ == module.__name__
            and getattr(cls, "name", "")]


def package_classes(package: str, path, base: type) -> list[type]:
    """The named subclasses of ``base`` that the public modules of ``package`` (its ``__path__``:
    ``path``; modules starting with "_" and ``base`` skipped) define, by name: a package's
    built-ins."""
    return sorted((cls for info in pkgutil.iter_modules(path)
                   if not info.name.startswith("_") and info.name != "base"
                   for cls in subclasses_in(importlib.import_module(f"{package}.{info.name}"), base)),
                  key=lambda cls: cls.name)


# Every plug-in file this process imported: its absolute path -> the SHA-256 of its bytes as
# imported (a trace records them: the file may change or move after the run).
PLUGIN_FILES: dict[str, str] = {}


def article(kind: str) -> str:
    """"a problem", "an orderer": the kinds of plug-in a file may define."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def load_file(path: str, kind: str, base: type) -> type:
    """The one subclass of ``base`` (with a name) that the Python file ``path`` defines."""
    file = Path(path)
    if not file.is_file():
        from ordersim.output import missing_file

        raise ValueError(f"{kind} file {path!r} {missing_file(path)} ({article(kind)} is a registered name or "
                         f"a path to a .py file)")
    if file.suffix != ".py":  # importlib finds no loader for it
        raise ValueError(f"{kind} file {path!r} is not a .py file ({article(kind)} is a registered name or a "
                         f"path to a .py file)")
    # The same module name in every process (Numba's cache and pickle refer to the module by it):
    # a digest of the absolute path, not hash(), which Python salts per process.
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:16]
    stem = re.sub(r"[^0-9A-Za-z_]", "_", file.stem)
    module_name = f"ordersim_user_{kind.replace(' ', '_')}_{stem}_{digest}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        source = file.read_bytes()
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise ValueError(f"{kind} file {path!r} failed to import: {type(exc).__name__}: {exc}") from exc
        PLUGIN_FILES[str(file.resolve())] = hashlib.sha256(source).hexdigest()
    classes = subclasses_in(sys.modules[module_name], base)
    if len(classes) != 1:
        raise ValueError(f"{kind} file {path!r} must define exactly one subclass of "
                         f"{base.__module__}.{base.__qualname__} with a non-empty name, found {len(classes)}")
    return classes[0]


class Registry(Mapping):
    """Name -> class of one kind of plug-in (module docstring).

    ``kind`` is the singular word of the messages ("straggler model"), ``group`` the entry-point
    group, ``builtins`` a function returning the built-in classes and ``base`` (a function
    returning the base class, imported only when a file or an entry point is checked) the class
    that every entry must derive from.
    """

    def __init__(self, kind: str, group: str, builtins: Callable[[], Iterable[type]],
                 base: Callable[[], type], plural: str | None = None):
        self.kind, self.group, self.plural = kind, group, plural or kind + "s"
        self._builtins, self._base = builtins, base
        self._entries: dict[str, type] | None = None  # built-ins and entry points
        self._files: dict[str, type] = {}  # classes loaded from files, by name (the last file wins)

    def _load(self) -> dict[str, type]:
        if self._entries is None:
            entries: dict[str, type] = {}
            for cls in self._builtins():
                self._add(entries, cls.name, cls, "ordersim")
            for point in sorted(entry_points(group=self.group), key=lambda point: point.name):
                try:
                    cls = point.load()
                except Exception as exc:
                    raise PluginError(f"entry point {point.name!r} of group {self.group!r} "
                                       f"({point.value}) failed to load: {type(exc).__name__}: {exc}") from exc
                self._check(cls, f"entry point {point.name!r} of group {self.group!r} ({point.value})")
                if cls.name != point.name:
                    raise PluginError(f"entry point {point.name!r} of group {self.group!r} names "
                                       f"the {self.kind} {cls.name!r}; the two names must agree")
                self._add(entries, point.name, cls, point.value)
            self._entries = entries
        return self._entries

    def _check(self, cls, where: str) -> None:
        base = self._base()
        if not (inspect.isclass(cls) and issubclass(cls, base) and getattr(cls, "name", "")):
            raise PluginError(f"{where} is not a subclass of {base.__module__}.{base.__qualname__} "
                               f"with a name")

    def _add(self, entries: dict, name: str, cls: type, where: str) -> None:
        if name in entries and entries[name] is not cls:
            raise PluginError(f"two {self.plural} are named {name!r} (one from {where})")
        entries[name] = cls

    # -- the mapping ----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> type:
        return self._load()[name]

    def __iter__(self):
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self) if self._entries is not None else '...'})"

    # -- look-ups -------------------------------------------------------------------------------
    def get_class(self, name: str) -> type:
        """The class registered as ``name``, or the one a .py file at that path defines, which its name finds from then on in this process (a later file of the same
        name replaces it; the name of a built-in or an entry point is refused); else ValueError."""
        if not isinstance(name, str):
            raise ValueError(f"a {self.kind} is a name or a path, got {name!r}")
        if name in self:
            return self[name]
        if name in self._files:
            return self._files[name]
        if is_path(name):
            cls = load_file(name, self.kind, self._base())
            if cls.name in self._load():
                raise ValueError(f"{self.kind} file {name!r} defines {cls.name!r}, the name of a "
                                 f"registered {self.kind}; give it another name")
            self._files[cls.name] = cls
            return cls
        raise ValueError(f"unknown {self.kind} {name!r}; known {self.plural}: {self.choices()} (or a path "
                         f"to a .py file)")

    def loaded(self) -> list[type]:
        """Every class this process knows: the registered ones, then those loaded from files."""
        return [*self._load().values(), *self._files.values()]

    def descriptions(self) -> dict[str, str]:
        """Every name and its one-line description, in the registry's order."""
        return {name: cls.description for name, cls in self.items()}

    def choices(self) -> str:
        """The names, comma-separated (for help texts and errors)."""
        return ", ".join(self)


__all__ = ["PLUGIN_FILES", "PluginError", "Registry", "is_path", "load_file", "subclasses_in"]
