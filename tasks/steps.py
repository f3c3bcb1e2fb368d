"""Steps: plain functions whose outputs live in the Parquet result store, run as Prefect tasks.

Kept as one module: the step declaration, its key and its one cache-hit path are one
mechanism.

A *step* is a plain function of data to data (Kedro's nodes) declared with
:func:`step`.  Bound to a :class:`~scarce.tasks.store.Store` (:func:`scarce.tasks.step_tasks.bind`,
the
one place that imports Prefect: declaring, keying and calling a step need none) it becomes a
Prefect task that

* takes its upstream inputs as store refs (small strings), loads them, calls
  the function, writes each output to the store and returns the refs;
* is keyed by :class:`~scarce.tasks.step_tasks.StoreCachePolicy`: a hash of the step's name,
version,
  the source of every project module its code can reach
  (:func:`scarce.tasks.code_digest.code_digest`:
  the module that defines it and, transitively, every module of ``algorithms``
  and ``tasks`` imported from there, found by reading the imports, never listed
  by hand), its parameters, the refs of its inputs and, for each input file, its
  content hash and what its reader decides from its name (:data:`NameRule`).
  *Runtime* parameters (where a step runs: a Dask scheduler's
  address, a worker count) are left out of the key: they must not change what
  the step computes, so a step run elsewhere finds the same entries.  The
  cache check never touches the data: Prefect's ``INPUTS`` policy pickles and
  hashes every input, which was unstable for pandas inputs and took seconds on
  large ones;
* shows as *Cached* in the Prefect UI when its outputs are already in the store
  and pass their checksums.  A missing or damaged output is logged as a warning
  and the step runs again.

Prefect keeps its cache records (a few hundred bytes of JSON holding the refs,
never a pickle) in ``<store>/_prefect``.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scarce.tasks.code_digest import code_digest
from scarce.tasks.logs import log_both as log_both  # (re-exported)
from scarce.tasks.store.atomic import file_sha256
from scarce.tasks.store.layout import KEY_HEX
from scarce.tasks.store.seals import damaged_entries, seal_bytes, seal_path, write_seal

if TYPE_CHECKING:  # given by the caller: declaring a step imports no store (nor its pandas)
    from scarce.tasks.store import Store

log = logging.getLogger("scarce.store")


KEY_LENGTH = KEY_HEX


def canonical(value: Any) -> Any:
    """A JSON-able, order-independent form of ``value`` for hashing."""
    if hasattr(value, "model_dump"):  # pydantic models
        return canonical(value.model_dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(
        f"step parameters must be JSON-like (got {type(value).__name__}); pass data through "
        "the store as a ref"
    )


def digest(obj: Any) -> str:
    text = json.dumps(canonical(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_file_hashes: dict[tuple[str, int, int], str] = {}
_file_lock = threading.Lock()


def cached_file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, memoised on (path, size, mtime)."""
    st = os.stat(path)
    k = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    with _file_lock:
        if k in _file_hashes:
            return _file_hashes[k]
    h = file_sha256(path)
    with _file_lock:
        _file_hashes[k] = h
    return h


#: What a step's reader decides from an input file's *name* (not its bytes), given the call's
#: arguments (defaults applied): a JSON-like value that enters the step's key beside the file's
#: sha256.  Two byte-identical files read differently by name (``train.tsv`` and
#: ``train_tabs.csv``; ``x.txt.gz`` and ``x.txt``; a CoNLL-U document named after its file)
#: must not share an entry.
NameRule = Callable[[Path, dict[str, Any]], Any]


def whole_name(path: Path, call: dict[str, Any]) -> str:
    """The default :data:`NameRule`: the file's whole name (not its folder).

    Whatever a reader infers from a name alone -- a table's kind from its suffix, gzip from
    ``.gz`` (case-sensitively in :mod:`scarce.tasks.readers.text`, case-blind in pandas), a
    document's id from the name without ``.gz`` and ``.conllu`` -- is a function of it, so a
    ``files`` parameter declared without a rule can never share an entry with a file its
    reader reads otherwise.  A step narrows it with its reader's own rule (``files={"path":
    rule}``) so that renaming a file to a name read the same way keeps its entries.
    """
    return Path(path).name


def content_only(path: Path, call: dict[str, Any]) -> None:
    """A :data:`NameRule` for a file read by its bytes alone (a store-format Parquet file,
    whose reader takes nothing from its name) or not read at all (named in errors only)."""
    return None


#: The steps that may run in another process (``where``), by name, in the process that
#: imported them: how a Dask worker finds the step it is sent (:func:`execute_by_name`).
_REMOTE_STEPS: dict[str, Step] = {}
#: The code digest of each module that declares steps, by module name, computed when its
#: first step is declared: the steps of a module are declared together as it is imported,
#: and walking the imports again for each of them (a module declares a score of steps) cost
#: a command that runs a few of them more than its work.
_MODULE_DIGESTS: dict[str, str] = {}


@dataclass(eq=False)
class Step:
    """A store-backed task; see :func:`step`, which declares it.  ``outputs`` holds every part
    (the volatile ones last), ``runtime`` every parameter left out of the key (``where``'s
    among them)."""

    fn: Callable[..., Any]
    name: str
    version: str
    inputs: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    outputs: tuple[str, ...] | None = None
    names: dict[str, NameRule] = field(default_factory=dict)
    run_name: str | None = None
    volatile: tuple[str, ...] = ()
    runtime: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    where: tuple[str, Callable[[Any], Any]] | None = None
    write_behind: bool = False
    #: Its Prefect tasks by store root and refresh (:func:`scarce.tasks.step_tasks.bind`).
    _bound: dict[tuple[str, bool], Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.where is not None:  # found by name in the process it is sent to
            _REMOTE_STEPS[self.name] = self
        module = self.fn.__module__
        if module not in _MODULE_DIGESTS:
            _MODULE_DIGESTS[module] = code_digest(module)
        self.code_hash = _MODULE_DIGESTS[module]
        self.signature = inspect.signature(self.fn)
        params = self.signature.parameters
        self.names = {f: self.names.get(f, whole_name) for f in self.files}
        for n in (*self.inputs, *self.files, *self.runtime, *self.paths):
            if n not in params:
                raise TypeError(f"step {self.name}: {n!r} is not a parameter of {self.fn.__name__}")
        if set(self.runtime) & {*self.inputs, *self.files, *self.paths}:
            raise TypeError(f"step {self.name}: a runtime parameter cannot also be an input, a "
                            "file or a paths parameter")
        if set(self.paths) & {*self.inputs, *self.files}:
            raise TypeError(f"step {self.name}: a paths parameter cannot also be an input or a "
                            "file")

    # -- keys -------------------------------------------------------------
    def key(self, kwargs: dict[str, Any]) -> str:
        """The store key of a call with these arguments (runtime parameters left out)."""
        left_out = {*self.inputs, *self.files, *self.runtime, *self.paths}
        params = {k: v for k, v in kwargs.items() if k not in left_out}
        files = {k: self.file_key(k, kwargs) for k in self.files if kwargs.get(k) is not None}
        inputs = {k: kwargs.get(k) for k in (*self.inputs, *self.paths)}
        return digest(
            {
                "step": self.name,
                "version": self.version,
                "code": self.code_hash,
                "params": params,
                "inputs": inputs,
                "files": files,
            }
        )[:KEY_LENGTH]

    def file_key(self, name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """What input file ``name`` of a call contributes to its key: the sha256 of its bytes
        and what its reader decides from its name (:data:`NameRule`; the whole name unless
        the step declares its reader's rule)."""
        call = {n: p.default for n, p in self.signature.parameters.items()
                if p.default is not inspect.Parameter.empty}
        call.update(kwargs)
        path = Path(kwargs[name])
        return {"sha256": cached_file_sha256(path), "name": self.names[name](path, call)}

    def is_volatile(self, ref: str) -> bool:
        """True for parts that hold wall-clock measurements (not compared by rerun)."""
        return any(ref.endswith(f"-{part}") for part in self.volatile)

    def lasting(self, refs: Any) -> Any:
        """``refs`` (an iterable of refs, or a mapping keyed by them) without the volatile
        parts: what the call's seal records (:mod:`scarce.tasks.store.seals`)."""
        if isinstance(refs, dict):
            return {r: v for r, v in refs.items() if not self.is_volatile(r)}
        return [r for r in refs if not self.is_volatile(r)]

    def damaged(self, store: Store, key: str) -> dict[str, str]:
        """ref -> reason for every damaged output of the call ``key`` (empty when all are
        intact; :func:`scarce.tasks.store.seals.damaged_entries`)."""
        return damaged_entries(store, key, _iter_refs(self.refs(key)))

    def refs(self, key: str) -> str | dict[str, str]:
        """The refs a call with this key writes (one, or one per output part)."""
        if self.outputs is None:
            return f"{self.name}/{key}"
        return {part: f"{self.name}/{key}-{part}" for part in self.outputs}

    # -- cache hits -------------------------------------------------------
    def clean_hit(self, store: Store, kwargs: dict[str, Any],
                  hold: Callable[[Any], Any] | None = None) -> str | dict[str, str] | None:
        """The refs of this call when the store holds it intact: its cache record exists and
        every entry passes its seal or its read (:meth:`damaged`); None otherwise (no
        record, a damaged entry, arguments that do not bind), and the call goes through
        Prefect, whose cache policy (:class:`~scarce.tasks.step_tasks.StoreCachePolicy`) names and
        repairs the damage.

        ``hold(refs)``: a context manager held while the entries are checked (a run's lease,
        so that a gc running meanwhile keeps them).  The one place a hit is decided: the
        flows' fast path asks here before starting a task run, the policy asks the same
        question (:meth:`damaged`) inside one.
        """
        try:
            bound = self.signature.bind(**kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        key = self.key(dict(bound.arguments))
        if not (store.prefect_dir / key).is_file():
            return None
        refs = self.refs(key)
        with hold(_iter_refs(refs)) if hold is not None else nullcontext():
            try:
                if self.damaged(store, key):
                    return None
            except (OSError, ValueError):
                return None
        return refs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the plain function (no store, no Prefect), as a Kedro node."""
        return self.fn(*args, **kwargs)


def step(
    name: str,
    *,
    version: str = "1",
    inputs: Sequence[str] = (),
    files: Sequence[str] | dict[str, NameRule] = (),
    outputs: Sequence[str] | None = None,
    run_name: str | None = None,
    volatile: Sequence[str] = (),
    runtime: Sequence[str] = (),
    paths: Sequence[str] = (),
    where: tuple[str, Callable[[Any], Any]] | None = None,
    write_behind: bool = False,
) -> Callable[[Callable[..., Any]], Step]:
    """Declare a store-backed step.

    Parameters
    ----------
    name : str
        Task name and store folder (``leml-load``).
    version : str
        Bump it when the output of the same code and parameters must change.
    inputs : names of parameters that receive upstream outputs.  The flow passes
        refs (a string, or a dict of part -> ref); the function gets the data.
    files : names of parameters that are input file paths, or a mapping of those names
        to the :data:`NameRule` of their reader.  The key holds each file's content hash
        (not its folder: the same data moved keeps its entries) and what its reader
        decides from its name: the rule given, else the whole name (:func:`whole_name`).
        Declared per reader rather than taken as a suffix chain: readers take more than
        a suffix from a name (CoNLL-U document ids, a relations file's source name) and
        disagree on case (``.GZ``), so only the reader can say what its name changes; a
        parameter without a rule is keyed by its whole name, which cannot miss.
    outputs : part names when the function returns a dict of several outputs;
        None when it returns one value.
    run_name : Prefect task run name template (``"alternate-W iter={iteration}"``).
    volatile : further parts of the returned dict, after ``outputs``, that hold wall-clock
        times; they are stored and listed in the manifest, but a rerun does not expect the
        same bytes, and a step's seal leaves them out.
    runtime : names of parameters that say what the step may check, or where it runs, but
        not what it computes (a flag that the file must have labels, a Dask scheduler's
        address); they are passed to the function but left out of the key, so the same
        call run elsewhere finds the same entries.  The step must give the same outputs
        whatever their values.  ``where``'s parameter is one without being named here.
    paths : names of parameters that receive refs of upstream outputs, keyed by
        their refs as ``inputs`` are, but passed to the function as the absolute
        paths of the store's files (a str per ref) instead of the data: for a step
        that hands the files to other processes (Dask workers that read their own
        row blocks) and must not read them itself.
    where : ``(parameter, opener)``: the step may run in another process.  ``parameter``, a
        runtime parameter (left out of the key), says where; ``opener(value)`` returns a
        context manager giving a Dask client, or None to run here.  With a client, the whole
        step (reading its inputs, the function, writing its entries and seal) is one task on
        that cluster, which must see the same store path (a shared filesystem), and only the
        refs come back: a step over data that the flow's process must never hold.
    write_behind : when the step runs in the flow's own process, its entries and seal are
        written in the background (:meth:`scarce.tasks.store.Store.write_later`) while the next step
        computes; every read of them waits for the write.  For the steps of an iterative
        loop, whose per-iteration checkpoints would otherwise add their write to every
        iteration.  A step run in a Dask worker writes before it returns, as every step does.
    """

    # Each fact is said once: a volatile part is not listed among the outputs too, nor
    # where's parameter among the runtime ones.
    if volatile and outputs is None:
        raise TypeError(f"step {name}: volatile parts are parts of a dict of outputs; "
                        "give its other parts as outputs")
    if set(volatile) & set(outputs or ()):
        raise TypeError(f"step {name}: {sorted(set(volatile) & set(outputs))} listed in "
                        "outputs and in volatile: a volatile part is named in volatile only")
    if where is not None and where[0] in runtime:
        raise TypeError(f"step {name}: {where[0]!r} is runtime as where's parameter; leave it "
                        "out of runtime")

    def decorate(fn: Callable[..., Any]) -> Step:
        return Step(
            fn=fn,
            name=name,
            version=version,
            inputs=tuple(inputs),
            files=tuple(files),
            names=dict(files) if isinstance(files, dict) else {},
            outputs=None if outputs is None else (*outputs, *volatile),
            run_name=run_name,
            volatile=tuple(volatile),
            runtime=(*runtime, *(() if where is None else (where[0],))),
            paths=tuple(paths),
            where=where,
            write_behind=write_behind,
        )

    return decorate


def _iter_refs(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [r for v in value.values() for r in _iter_refs(v)]
    if isinstance(value, list | tuple):
        return [r for v in value for r in _iter_refs(v)]
    return []


def _map_refs(value: Any, fn: Callable[[str], Any], what: str) -> Any:
    """``value`` (a ref, None, or a dict/list of them) with ``fn`` applied to every ref."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_refs(v, fn, what) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_map_refs(v, fn, what) for v in value]
    if value is None:
        return None
    raise TypeError(f"{what} must be a ref or a dict/list of refs, got {type(value).__name__}")


def _load(store: Store, value: Any) -> Any:
    return _map_refs(value, store.read_input, "an input")


def _paths(store: Store, value: Any) -> Any:
    """``value`` (refs as :func:`_load` takes them) with every ref replaced by the absolute
    path of its file."""
    return _map_refs(value, lambda ref: str(store.path(ref).absolute()), "a paths parameter")


def _make_runner(st: Step, store: Store) -> Callable[..., Any]:
    sig = st.signature

    @functools.wraps(st.fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        call = dict(bound.arguments)
        if st.where is not None:
            parameter, opener = st.where
            with opener(call[parameter]) as client:
                if client is not None:
                    key = st.key(call)
                    return client.submit(
                        execute_by_name, st.fn.__module__, st.name, str(store.root),
                        call, key, key=f"{st.name}-{key}", pure=False).result()
        return execute(st, store, call)

    run.__signature__ = sig  # Prefect reads parameter names from it
    return run


def _in_dask_worker() -> bool:
    """Whether this code runs in a Dask worker.  Written here rather than taken from
    ``tasks.leml_dask`` so that every step's code digest stays free of that package; and
    ``distributed`` not imported yet means no worker (importing it only to ask is slow)."""
    if "distributed" not in sys.modules:
        return False
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def execute(st: Step, store: Store, call: dict[str, Any], *,
            write_behind: bool | None = None) -> str | dict[str, str]:
    """Run the step on bound arguments ``call``: its inputs read from ``store``, the
    function called, its outputs and seal written (in the background for a
    ``write_behind`` step in the flow's own process, see :func:`step`); returns the refs."""
    key = st.key(call)
    data = {k: (_load(store, v) if k in st.inputs
                else _paths(store, v) if k in st.paths else v) for k, v in call.items()}
    result = st.fn(**data)
    refs = st.refs(key)
    # The entries' step, key and part are their refs (their paths), not in their files: a
    # step whose code changed and whose result did not writes the same bytes again.
    if isinstance(refs, str):
        entries = [(refs, result)]
    else:
        if not isinstance(result, dict) or set(result) != set(refs):
            got = sorted(result) if isinstance(result, dict) else type(result).__name__
            raise TypeError(f"step {st.name} must return a dict of {sorted(refs)}, got {got}")
        entries = [(ref, result[part]) for part, ref in refs.items()]
    if write_behind is None:
        write_behind = st.write_behind and not _in_dask_worker()
    if write_behind:
        store.write_later(entries, seal_path(store, key),
                          lambda digests: seal_bytes(st.lasting(digests)))
        return refs
    store.write_all(entries)  # lasting (their folders fsync-ed) before the seal names them
    write_seal(store, key, st.lasting(_iter_refs(st.refs(key))))
    return refs


def execute_by_name(module: str, name: str, store_root: str, call: dict[str, Any],
                    expected_key: str) -> str | dict[str, str]:
    """:func:`execute` in another process (a Dask worker): the step ``name`` as that process
    declares it when it imports ``module`` (its function's), and the store by its root (the
    same path there).  Refused when the worker keys the call otherwise than the caller did
    (``expected_key``): a worker running other code would write entries under keys that do
    not describe them."""
    import importlib

    importlib.import_module(module)
    st = _REMOTE_STEPS[name]
    if st.key(call) != expected_key:
        raise RuntimeError(f"step {st.name}: this worker runs other code than the flow that "
                           "sent it (its key of the call differs); start the workers from the "
                           "same version of the project")
    from scarce.tasks.store import Store

    return execute(st, Store(store_root), call, write_behind=False)

