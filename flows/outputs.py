"""Where a command may write a path the user names: one guard for every output option.

A command that writes a file or folder the user names (``scarce apply --output``, ``scarce runs
--output``, ``scarce init DIR``, an apply config's ``output``, ``StripModel.predict(output=)``)
writes none of these:

* an input of any recorded run (the manifests' ``inputs``, under any name: hard links and
  symbolic links included), one of the command's own input files, or a file among its input
  files in an input folder;
* anything inside the result store or the runs folder, which scarce writes itself and whose
  files the manifests and the store's checksums vouch for;
* an existing file, unless the command's ``--force`` (``force: true``) says to replace it;
* a file whose name says another format than the one written;
* a path that cannot be written: not encodable as UTF-8 (a manifest records it), in a folder
  that does not exist or that this process may not write.

Every output option of the command line is declared with :func:`add_output`, which keeps the
option's :class:`Output` (file or folder, the suffixes it takes, its ``--force`` flag) on the
argparse action; :func:`check_command` finds them from the parser and checks the chosen
command's before its handler runs, so before any server starts or any work is done.  A test
walks every parser for options that name a path to write and fails on one that is not declared
so; a new command cannot miss the guard.  The flows check the files they will write with the
same :func:`check_targets` (an apply config written by hand, a deployment) once they know them.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from scarce.tasks.errors import InputError
from scarce.tasks.store.atomic import try_create_in

__all__ = [
    "Output",
    "Protected",
    "add_output",
    "check_command",
    "check_output",
    "check_targets",
    "output_actions",
    "write_failed",
]


@dataclass(frozen=True)
class Output:
    """What an output option names.

    Attributes
    ----------
    kind : {"file", "folder", "file or folder"}
        A file to write, a folder to write files into (created with its parents when absent),
        or either (decided by the command from its input: one file or a folder of them).
    suffixes : tuple of str
        The endings a file's name may have (lower case, e.g. ``(".parquet", ".csv")``); empty:
        any.
    force : str or None
        The ``dest`` of the command's flag that allows replacing an existing file; None: the
        command never replaces one.
    input : str or None
        The ``dest`` of the command's input option: the output is never that input (nor,
        for a folder of inputs, among its files); for ``"file or folder"``, the output is a
        folder when that input is a folder, or when the output is an existing folder.
    """

    kind: str = "file"
    suffixes: tuple[str, ...] = ()
    force: str | None = "force"
    input: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("file", "folder", "file or folder"):
            raise ValueError(f"unknown output kind {self.kind!r}")


#: The attribute of an argparse action that holds its :class:`Output`.
ATTR = "scarce_output"


def add_output(parser: argparse.ArgumentParser, *flags: str, output: Output,
               **kwargs) -> argparse.Action:
    """``parser.add_argument(*flags, **kwargs)`` for an option naming a path to write, marked
    with ``output`` so that :func:`check_command` guards it."""
    action = parser.add_argument(*flags, **kwargs)
    setattr(action, ATTR, output)
    return action


def output_actions(parser: argparse.ArgumentParser,
                   prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], argparse.Action]]:
    """Every action of ``parser`` and its subcommands' parsers, with the command path that
    reaches it (``("runs",)``, ``("cache", "gc")``), whether or not it is an output option."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.extend(output_actions(sub, (*prefix, name)))
        else:
            out.append((prefix, action))
    return out


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[argparse.Action]:
    """The actions of the subcommand ``args`` was parsed with (its parser and its parents')."""
    actions = list(parser._actions)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                actions.extend(_chosen(action.choices[name], args))
    return actions


def check_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Check every output option given to the chosen command (see the module notes).

    Raises
    ------
    InputError
        Naming the option and the path; nothing has been written.
    """
    protected = None
    for action in _chosen(parser, args):
        output = getattr(action, ATTR, None)
        value = getattr(args, action.dest, None) if output is not None else None
        if value is None:
            continue
        protected = protected or Protected.here()
        force = bool(getattr(args, output.force, False)) if output.force else False
        key = action.option_strings[0] if action.option_strings else action.metavar
        target = Path(value)
        given = getattr(args, output.input, None) if output.input else None
        source = Path(given) if given is not None else None
        folder = output.kind == "folder" or (output.kind == "file or folder" and (
            target.is_dir() or (source is not None and source.is_dir())))
        check_output(target, output, force=force, key=key, protected=protected, folder=folder,
                     source=source)


# -- the places nothing user-named is written to ------------------------------------------
@dataclass
class Protected:
    """The store, the runs folder and the inputs of every recorded run: what no user-named
    output may replace."""

    store_root: Path
    runs_root: Path
    inputs: list[Path]

    @classmethod
    def here(cls) -> Protected:
        """The places of the project the command runs in (``SCARCE_STORE``, ``SCARCE_RUNS``,
        ``SCARCE_ROOT`` or the current folder)."""
        from scarce.flows.config import default_runs_root, default_store_root

        return cls.of(Path(default_store_root()), default_runs_root())

    @classmethod
    def of(cls, store_root: Path, runs_root: Path) -> Protected:
        return cls(Path(store_root), Path(runs_root), recorded_inputs(runs_root))

    def areas(self) -> list[tuple[Path, str]]:
        return [(_real(self.store_root), "the result store"),
                (_real(self.runs_root), "the runs folder")]


def check_writable_folder(path: Path, key: str) -> None:
    """Refuse, before a run computes, a folder it could not write: ``path`` (or, while it does
    not exist, its nearest existing parent) must be a folder this process may write.

    Raises
    ------
    InputError
        Naming ``path`` and ``key`` (the option or variable that chose it).
    """
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{existing} is not a folder", path=path, key=key)
    # access(2) reports a read-only file system (EROFS) for root too
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{existing} is not writable (read-only, or not ours)", path=path,
                         key=key)


def recorded_inputs(runs_root: Path) -> list[Path]:
    """The input files the manifests of ``runs_root`` record (relative ones are relative to the
    project root, as the run recorded them).  A manifest that cannot be read is skipped: it is
    inside the runs folder, which is protected whole."""
    import json

    from scarce.flows import manifest as mf
    from scarce.flows.config import project_root

    root = project_root()
    out: dict[str, Path] = {}
    for folder in mf.run_folders(Path(runs_root)):
        try:
            m = json.loads((folder / mf.MANIFEST).read_text(encoding="utf-8"))
            entries = m.get("inputs") or []
            paths = [e["path"] for e in entries if isinstance(e, dict)
                     and isinstance(e.get("path"), str)]
        except (OSError, ValueError, AttributeError):
            continue
        for p in paths:
            path = Path(p)
            out.setdefault(p, path if path.is_absolute() else root / path)
    return list(out.values())


def _real(path: Path) -> Path:
    """``path`` with every symbolic link resolved (also when it does not exist yet)."""
    return Path(os.path.realpath(path))


def _same_file(a: Path, b: Path) -> bool:
    """One file under two names: the same path once links are resolved, or a hard link."""
    if _real(a) == _real(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist
        return False


def _encodable(path: Path, key: str) -> None:
    """A path the manifest and the messages can hold: a byte that is not UTF-8 in a command's
    argument arrives as a lone surrogate, which no JSON file or terminal takes."""
    try:
        os.fsencode(path)
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError("the path is not valid UTF-8; rename it or choose another",
                         path=ascii(str(path)), key=key) from None


def _writable_folder(folder: Path, target: Path, key: str) -> None:
    """``folder`` (or, while it does not exist, its nearest existing ancestor, where the
    missing folders will be created) is a folder this process may create a file in: a file is
    created and removed, so read-only file systems and foreign folders are found too."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{existing} is not a folder", path=target, key=key)
    try:
        try_create_in(existing)
    except OSError as exc:
        raise InputError(f"cannot write into {existing}: {exc.strerror or exc}", path=target,
                         key=key) from None


def check_output(target: Path, output: Output, *, force: bool, key: str = "output",
                 protected: Protected | None = None, folder: bool | None = None,
                 source: Path | None = None) -> None:
    """Check a path the user named for ``output``, before anything runs.

    A file: its name ends in one of ``output.suffixes``, its folder is writable (missing
    folders are created with their parents when it is written), and it passes
    :func:`check_targets`.  A folder (``folder``; default: the output's kind is
    ``"folder"``): not a file, not inside a protected area and not an input; its nearest
    existing ancestor writable (the files written into it are checked by the command once it
    knows them).  ``source`` is the command's input file or folder, if it has one.
    """
    protected = protected or Protected.here()
    _encodable(target, key)
    if folder is None:
        folder = output.kind == "folder"
    if not folder:
        _check_place(target, key, protected, source=source)
        if target.is_dir():
            raise InputError("a folder where a file is written", path=target, key=key)
        if output.suffixes and not target.name.lower().endswith(output.suffixes):
            raise InputError(f"the name must end in {' or '.join(output.suffixes)} (the format "
                             "written)", path=target, key=key)
        _writable_folder(target.parent, target, key)
        check_targets([target], source=source, force=force, key=key, protected=protected)
        return
    _check_place(target, key, protected, source=source)
    if target.exists() and not target.is_dir():
        raise InputError("a file where a folder is written", path=target, key=key)
    _writable_folder(target, target, key)


def check_targets(targets: Iterable[Path], *, inputs: Iterable[Path] = (),
                  source: Path | None = None, force: bool, key: str = "output",
                  protected: Protected | None = None) -> None:
    """Refuse, before anything is written, a user-named file where nothing may be written.

    ``targets`` are the files the command will write; ``inputs`` its own input files and
    ``source`` its input file or folder.  Refused: an input (the command's, or any recorded
    run's; under any name), a file among the inputs in the input folder, anything inside the
    result store or the runs folder, an existing file unless ``force``, a folder in the place of
    a file.

    Raises
    ------
    InputError
        Naming the file and ``key``; nothing has been written.
    """
    protected = protected or Protected.here()
    inputs = list(inputs)
    for target in map(Path, targets):
        _check_place(target, key, protected, inputs, source)
        if target.is_dir() and not target.is_symlink():
            raise InputError("the output is a folder where a file is written", path=target,
                             key=key)
        if (target.exists() or target.is_symlink()) and not force:
            raise InputError("the output file exists; give --force (or force: true) to "
                             "replace it", path=target, key=key)


def _check_place(target: Path, key: str, protected: Protected, inputs: list[Path] = (),
                 source: Path | None = None) -> None:
    """Refuse a path (a file or a folder to write) that is an input or lies where only scarce
    writes."""
    _encodable(target, key)
    real = _real(target)
    if source is not None and source.is_dir() and _real(source) in (real, real.parent):
        raise InputError("the output would be written among the input files; choose "
                         "another folder", path=target, key=key)
    if any(_same_file(target, p) for p in [*inputs, *([source] if source else [])]):
        raise InputError("the output would overwrite an input file; choose another path",
                         path=target, key=key)
    for root, what in protected.areas():
        if real == root or real.is_relative_to(root):
            raise InputError(f"the output is inside {what} ({root}), where only scarce "
                             "writes; choose a path outside it", path=target, key=key)
    if any(_same_file(target, p) for p in protected.inputs):
        raise InputError("the output would overwrite an input of a recorded run (see "
                         "`scarce runs`); choose another path", path=target, key=key)


def write_failed(exc: OSError, target: Path, key: str, kept: str | None = None) -> InputError:
    """The one-line error of a user-named output that could not be written after the work
    (a disk that filled meanwhile): the system's reason, the file, and where the results are
    kept (``kept``), so that nothing computed is lost."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(target) else ""
    then = f"; the results are kept in {kept}" if kept else ""
    return InputError(f"cannot write the output: {exc.strerror or exc}{where}{then}",
                      path=target, key=key)
