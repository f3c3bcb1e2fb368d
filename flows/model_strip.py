"""A StRip run's model as a Python object: the chains of new CoNLL-U documents.

What :func:`scarce.load_model` returns for a ``strip`` run.  The model is read from the run's
``outputs/model/`` (the rule tables in Parquet and ``model.json``, never a pickle; format in
docs/strip.md, read and checked by :func:`open_strip_model`, which ``scarce apply`` uses too)
and applied by the functions the apply-strip flow's steps call, here directly: the pairs built
with the settings the model records, the rules fired, single-link clustering, the CorefUD
writer.  So a notebook gets the chains, and the bytes, ``scarce apply`` writes for the same
input.

The learner's modules (scikit-learn, numba) are imported where the estimator is built or the
rules are learned, not by this module nor by applying the rules: ``scarce apply`` checks a StRip
model with :func:`open_strip_model` before it starts a server, and a loaded model predicts,
with neither.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from scarce.algorithms.strip.params import VARIANTS
from scarce.flows.config import validate_config
from scarce.flows.model_checks import kind_of, read_json
from scarce.flows.model_format import MODEL_JSON, input_files, open_model, resolve_model_run
from scarce.flows.outputs import Output, Protected, check_output, check_targets
from scarce.tasks import strip
from scarce.tasks.errors import InputError
from scarce.tasks.readers.conllu import read_conllu
from scarce.tasks.store.atomic import atomic_write_bytes, synced_folders

if TYPE_CHECKING:
    from scarce.algorithms.strip.ripper import StRip

#: The columns of :meth:`StripModel.predict`'s table.
CHAIN_COLUMNS = ["file", "doc", "mention", "sent", "start", "end", "text", "chain", "etype"]


PAPER_VARIANT = "strip-partial"  # the paper's method: applied when the run trained it


class _Variant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: Literal[tuple(VARIANTS)]
    rules: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\.parquet$")
    n_rules: int = Field(ge=0)
    loss_ratio: float | None = Field(None, gt=0)  # the ratio the rules were trained with


class _Preprocess(BaseModel):
    model_config = ConfigDict(extra="forbid")
    window: int = Field(ge=1)
    max_sentence_distance: int | None = Field(ge=0)
    source_kind: Literal["etype", "fraction"]
    etypes: list[str]
    fraction: float | None = Field(gt=0, le=1)
    seed: int | None = Field(ge=0)


class _ModelJson(BaseModel):
    """The parts of ``model.json`` apply-strip reads (the others describe the training)."""

    model_config = ConfigDict(extra="ignore")
    variants: list[_Variant] = Field(min_length=1)
    preprocess: _Preprocess
    features: dict[str, Literal["nominal", "numeric"]] = Field(min_length=1)


@dataclass(frozen=True)
class ModelVariant:
    """What apply-strip and a loaded model need of a model: a variant, its rule file, how to
    build the pairs (and the variants the run trained)."""

    variant: str
    rules: Path
    preprocess: dict
    kinds: dict[str, str]
    trained: tuple[str, ...] = ()


def open_strip_model(model_run: str, variant: str | None, runs_root: Path,
                     announce: bool = True) -> ModelVariant:
    """The model of the StRip run ``model_run`` (see
    :func:`scarce.flows.model_format.resolve_model_run`), with the rules of ``variant``
    (default: :data:`PAPER_VARIANT` when trained, else the run's first variant).

    Raises
    ------
    InputError
        No such run, a run of another flow, no model, an older format version, a malformed
        ``model.json`` (naming the key), a variant the run did not train, a missing rule file.
    """
    run_dir = resolve_model_run(model_run, "strip", runs_root)
    meta, folder = open_model(run_dir, "strip", strip.MODEL_VERSION, announce=announce)
    m = validate_config(meta, _ModelJson, folder / MODEL_JSON)
    trained = [v.name for v in m.variants]
    chosen = variant or (PAPER_VARIANT if PAPER_VARIANT in trained else trained[0])
    if chosen not in trained:
        raise InputError(f"run {run_dir.name} did not train {chosen} (it trained "
                         f"{', '.join(trained)})", key="variant")
    rules = folder / m.variants[trained.index(chosen)].rules
    if not rules.is_file():
        raise InputError("rule table of the model is missing", path=rules)
    return ModelVariant(chosen, rules, m.preprocess.model_dump(), dict(m.features),
                        tuple(trained))


class StripModel:
    """A StRip run's model: the rules of one variant and how the run built its pairs.

    Parameters
    ----------
    run_dir : Path
        The training run's folder (:func:`scarce.load_model` finds it).
    variant : str, optional
        The variant whose rules are applied; by default ``strip-partial`` (the paper's method)
        when the run trained it, else the run's first variant, as ``scarce apply`` chooses.

    Attributes
    ----------
    run_id : str
    variant : str
        The variant applied.
    variants : tuple of str
        The variants the run trained (``StripModel(run_dir, variant)`` loads another).
    rules_ : DataFrame
        Its rule table (``rule_id, antecedent_index, feature, op, value, pruned``).
    preprocess_ : dict
        The pair settings the run used (``window``, ``max_sentence_distance``, the sources).
    estimator_ : StRip
        The variant's estimator with every parameter the run trained it with (``get_params``:
        the variant's closure and unlabelled pairs, its loss ratio, the learner's settings and
        the run's seed, from ``model.json``; so ``sklearn.base.clone(estimator_)`` fitted on
        the run's training pairs learns its rules) and ``rules_`` set.  Built when first used
        (its module imports scikit-learn, which applying the rules does not need); its
        parameters are checked when the model loads.

    Notes
    -----
    ``documents`` is a CoNLL-U path (``.conllu`` or ``.conllu.gz``, CorefUD ``Entity=`` spans
    marking the mentions), a ``(tokens, mentions)`` pair as
    :func:`scarce.tasks.readers.conllu.read_conllu` returns it, or a list of either.  Each is one
    file: its mentions are linked as ``scarce apply`` links them (its entity ids are used only
    by :meth:`evaluate`).
    """

    def __init__(self, run_dir: Path, variant: str | None = None) -> None:
        run_dir = Path(run_dir)
        model: ModelVariant = open_strip_model(run_dir.name, variant, run_dir.parent)
        self.run_id, self.variant, self.variants = run_dir.name, model.variant, model.trained
        self._model = model
        self.rules_ = strip.load_rules.fn(path=model.rules)
        self.preprocess_ = dict(model.preprocess)
        # checked now, built when first used: the estimator's module imports scikit-learn,
        # which applying the rules does not need
        self._params = _estimator_params(model.rules.parent / MODEL_JSON, model.variant)

    @functools.cached_property
    def estimator_(self) -> StRip:
        from scarce.algorithms.strip.ripper import StRip

        estimator = StRip.from_variant(self.variant, **self._params)
        estimator.rules_ = self.rules_
        return estimator

    def __repr__(self) -> str:
        from scarce.algorithms.strip.rule_table import rule_count

        return (f"StripModel(run={self.run_id!r}, variant={self.variant!r}, "
                f"rules={rule_count(self.rules_)}, "
                f"window={self.preprocess_['window']})")

    # ------------------------------------------------------------------ the steps of apply
    def _files(self, documents: Any) -> list[tuple[str, Path | None, tuple]]:
        """``(name, path or None, (tokens, mentions))`` of every input file; a ``documents``
        that is none of those, or holds a bad item, is one :class:`InputError` naming it
        (``documents[1] is None``)."""
        if documents is None:
            raise InputError("documents is None; expected a CoNLL-U path, a (tokens, "
                             "mentions) pair or a list of them")
        one = (isinstance(documents, str | os.PathLike)
               or (isinstance(documents, tuple) and len(documents) == 2
                   and all(isinstance(d, pd.DataFrame) for d in documents)))
        if not one and (isinstance(documents, Mapping | bytes | pd.DataFrame)
                        or not isinstance(documents, Iterable)):
            raise InputError(f"documents is {kind_of(documents)}; expected a CoNLL-U path, a "
                             "(tokens, mentions) pair or a list of them")
        given = [documents] if one else list(documents)
        if not given:
            raise InputError("documents is empty: no document given (a CoNLL-U path, a "
                             "(tokens, mentions) pair or a list of them)")
        where = "documents" if one else "documents[{}]"
        items = []
        for k, item in enumerate(given):
            name = where.format(k)
            if isinstance(item, str | os.PathLike):
                if not str(item):
                    raise InputError(f"{name} is an empty path")
                if Path(item).is_dir():  # a folder: its CoNLL-U files in name order, as
                    items += input_files(Path(item), strip.DOC_SUFFIXES, False)  # apply
                    continue
            elif not (isinstance(item, tuple | list) and len(item) == 2
                      and all(isinstance(d, pd.DataFrame) for d in item)):
                raise InputError(f"{name} is {kind_of(item)}; expected a CoNLL-U path or a "
                                 "(tokens, mentions) pair as read_conllu returns")
            items.append(item)
        out = []
        for k, item in enumerate(items):
            if isinstance(item, str | os.PathLike):
                path = Path(item)
                out.append((path.name, path, read_conllu(path)))
            else:
                out.append((f"document-{k}", None, tuple(item)))
        return out

    def _apply(self, name: str, path: Path | None, frames: tuple) -> tuple[pd.DataFrame, ...]:
        """preprocess -> apply rules of one file: its mention table (``preprocess``'s) and
        its clusters (``apply_rules``'s)."""
        from scarce.algorithms.strip.features import pair_table

        tokens, mentions = frames
        where = path if path is not None else name
        try:
            men, pairs = pair_table(tokens, mentions, **self.preprocess_)
        except ValueError as exc:  # as the preprocess step words it
            raise InputError(f"cannot build mention pairs: {exc}", path=where) from None
        clusters = strip.apply_rules.fn(path=where, pairs=pairs, mentions=men, rules=self.rules_,
                                        method=self.variant, kinds=self._model.kinds)
        return men, clusters

    # ------------------------------------------------------------------ public
    def predict(self, documents: Any, output: str | os.PathLike[str] | None = None,
                force: bool = False) -> pd.DataFrame:
        """The chains of the documents' mentions, as ``scarce apply`` writes them.

        Parameters
        ----------
        documents
            One file or a list (see the class notes).
        output : path, optional
            Also write each file with its chains as CorefUD CoNLL-U, the bytes of ``scarce
            apply``'s output: to ``output`` itself for one file (its name must end in
            ``.conllu``) unless it is an existing folder, else to ``output/<name>`` (the
            input's name without ``.gz``).  Needs paths (the writer copies the input's lines).
            Checked before anything is computed by the output guard of the command line
            (:mod:`scarce.flows.outputs`): never an input, nor inside the store or the runs folder.
        force : bool, default False
            Replace files that exist at ``output`` (without it an existing file is an error
            and nothing is written).

        Returns
        -------
        DataFrame
            One row per mention, in file order (:data:`CHAIN_COLUMNS`): ``file`` (the input's
            name, or ``document-<k>`` for the k-th parsed document), ``doc``, ``mention``,
            ``sent``, ``start``, ``end`` (sentence and token ids as the reader gives them),
            ``text`` (the mention's words), ``chain`` (the entity id written in the CoNLL-U,
            ``e1``, ``e2``, ... numbered per file in the order of each chain's first mention;
            a mention in no chain is its own) and ``etype`` (the chain's type: the one all its
            mentions carry in the input, else empty).  ``groupby(["file", "chain"])`` gives
            the chains.
        """
        files = self._files(documents)
        targets = self._targets(files, output, force) if output is not None else []
        tables = []
        with synced_folders() as syncs:  # each folder fsync-ed once, after its last file
            for k, (name, path, (tokens, mentions)) in enumerate(files):
                _, clusters = self._apply(name, path, (tokens, mentions))
                chain = strip.number_chains(mentions["doc"].to_numpy(),
                                            clusters["cluster"].to_numpy())
                tables.append(pd.DataFrame({
                    "file": name, "doc": mentions["doc"].to_numpy(),
                    "mention": mentions["mention"].to_numpy(),
                    "sent": mentions["sent"].to_numpy(),
                    "start": mentions["start"].to_numpy(), "end": mentions["end"].to_numpy(),
                    "text": _mention_text(tokens, mentions),
                    "chain": [f"e{c}" for c in chain],
                    "etype": strip.chain_etypes(chain, mentions["etype"])})[CHAIN_COLUMNS])
                if targets:
                    text = strip.write_predicted.fn(path=path,
                                                    clusters=clusters)["conllu"].iloc[0]
                    atomic_write_bytes(targets[k], text.encode("utf-8"), syncs)  # (and folders)
        return pd.concat(tables, ignore_index=True)

    def evaluate(self, documents: Any) -> pd.DataFrame:
        """The metrics ``scarce apply`` records on these documents: the counts of chains and,
        for the files whose mentions carry gold chains, MUC, B³, CEAF-e and pairwise P / R / F1
        over the source mentions and over all (``all_*``), as the training run's ``evaluate``
        (:func:`scarce.tasks.strip.count_chains`).  Columns ``dataset, method, metric, value``."""
        done = [self._apply(name, path, frames) for name, path, frames in self._files(documents)]
        return strip.count_chains.fn(clusters=[c for _, c in done],
                                     mentions=[m for m, _ in done], dataset="python")

    def _targets(self, files: list, output: str | os.PathLike[str], force: bool) -> list[Path]:
        """Where each file is written (see :meth:`predict`), checked before anything runs."""
        if any(path is None for _, path, _ in files):
            raise ValueError("output needs CoNLL-U paths: the writer copies the lines of the "
                             "input file, which a parsed document does not keep")
        out = Path(output)
        names = [strip.output_name(path) for _, path, _ in files]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})[0]
            raise ValueError(f"two input files would both be written as {twice}")
        protected = Protected.here()
        if len(files) == 1 and not out.is_dir():
            check_output(out, Output("file", (".conllu",)), force=force, protected=protected,
                         source=files[0][1])
            targets = [out]
        else:
            if out.exists() and not out.is_dir():
                raise ValueError(f"several files are written to a folder, and {out} is a file")
            check_output(out, Output("folder"), force=force, protected=protected)
            targets = [out / n for n in names]
        check_targets(targets, inputs=[path for _, path, _ in files], force=force,
                      protected=protected)
        return targets


class _Learner(BaseModel):
    """What ``model.json`` records of the learner's settings (the parts read here)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    k_optimize: int
    dl_surplus: float
    max_thresholds: int
    seed: int
    loss_ratio: dict[str, Any] = {}


def _estimator_params(path: Path, variant: str) -> dict[str, Any]:
    """The parameters, beside the variant's set-up, of the StRip estimator a run trained
    ``variant`` with, from its ``model.json``: its loss ratio (chosen on dev, or the one the
    run used) and the learner's settings with the run's seed as ``random_state``, as the
    training steps built it (``StRip.from_variant(variant, **params).fit`` is the run's grow,
    prune and optimize)."""
    meta = read_json(path)
    learner = validate_config(meta.get("learner"), _Learner, path) if isinstance(
        meta.get("learner"), dict) else None
    if learner is None:
        raise InputError("model.json records no learner settings", path=path, key="learner")
    ratio = next(v.get("loss_ratio") for v in meta["variants"] if v.get("name") == variant)
    if ratio is None:  # a model recorded before the variants' ratios: the one ratio it tried
        tried = learner.loss_ratio.get("tried") or []
        if len(tried) != 1:
            raise InputError(f"model.json records no loss ratio of {variant}", path=path,
                             key="variants")
        ratio = tried[0]
    return {"loss_ratio": float(ratio), "k_optimize": learner.k_optimize,
            "dl_surplus": learner.dl_surplus, "max_thresholds": learner.max_thresholds,
            "random_state": learner.seed}


def _mention_text(tokens: pd.DataFrame, mentions: pd.DataFrame) -> list[str]:
    """The words of each mention (its tokens' forms joined by spaces)."""
    index = pd.MultiIndex.from_arrays([tokens["doc"].to_numpy(), tokens["position"].to_numpy()])
    start = index.get_indexer(pd.MultiIndex.from_arrays(
        [mentions["doc"].to_numpy(), mentions["position_start"].to_numpy()]))
    width = (mentions["position_end"] - mentions["position_start"]).to_numpy()
    form = tokens["form"].astype(str).to_numpy()
    return [" ".join(form[s:s + w + 1]) for s, w in zip(start, np.asarray(width), strict=True)]
