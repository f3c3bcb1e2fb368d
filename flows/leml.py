"""The LEML flow: load -> (alternate-W -> alternate-H) x T -> evaluate -> predict.

Kept as one module: the flow's config schema and the flow that reads it change together.

Yu, Jain, Kar and Dhillon, "Large-scale Multi-label Learning with Missing
Labels", ICML 2014.  The flow drives the step methods of :class:`algorithms.leml.LEML`,
one task per step with the store between them (``LEML.fit`` is the same loop in one
process); the model's options and their defaults are the estimator's (:class:`ModelConfig`),
the bundled values are in ``configs/leml.yaml``.  With ``compute.backend: dask`` the training
data is first written as ``compute.row_blocks`` row blocks (``leml-partition``), from which each
Dask worker reads its own blocks.

Every run names its outputs (:func:`name_outputs`): ``outputs/predictions.parquet`` (the test
set's top labels) and ``outputs/model/`` (the factors, the index maps, the config and
``model.json``), which the ``apply-leml`` flow (:mod:`flows.apply_leml`) applies to new data.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
from prefect import flow
from prefect.utilities.annotations import unmapped
from pydantic import Field, field_validator, model_validator

from scarce.algorithms.leml import (
    H_SOLVERS,
    LEML,
    PRECONDITIONERS,
    W_SOLVERS,
    BinaryRelevance,
    row_block_bounds,
)
from scarce.algorithms.leml.losses import LOSSES
from scarce.algorithms.leml.model import AUTO, AUTO_SQUARED_INIT_ITER
from scarce.algorithms.leml.predict import BATCH_SIZE
from scarce.algorithms.leml.text import VECTORIZERS
from scarce.flows import plots
from scarce.flows.apply import MODEL_DIR, model_document
from scarce.flows.config import (
    DATASET_NAME,
    NAME_LENGTH,
    FlowConfig,
    Strict,
    check_input_paths,
    from_estimator,
    input_path,
    resolve_path,
)
from scarce.flows.former_keys import compute_from_w_step, leml_renamed_key
from scarce.flows.published import LEML_XC
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions, lead_line, markdown_table
from scarce.tasks.errors import InputError
from scarce.tasks.leml import (
    BASELINES,
    TOP_K,
    alternate_H,
    alternate_W,
    baseline,
    baseline_params,
    check_inputs,
    check_parts,
    check_training_rows,
    collect,
    early_split,
    early_split_mask,
    evaluate,
    initialise,
    input_parts,
    load,
    observe,
    partition,
    partition_masked,
    predict,
    propensity,
    release_training_data,
    split,
    stack,
    task_params,
    tune,
)
from scarce.tasks.leml_dask import CLIENTS, RowBlockBackend
from scarce.tasks.leml_files import MODEL_FILES, MODEL_VERSION, label_file
from scarce.tasks.leml_table import (
    check_table_columns,
    check_table_labels,
    load_table,
    read_label_list,
    table_space,
)
from scarce.tasks.steps import cached_file_sha256, log_both

PUBLISHED = LEML_XC


class VectorizerConfig(Strict):
    """How ``format: table`` turns a text column into features: a scikit-learn vectoriser
    (its options, their defaults), fitted on the training table only and kept with the
    model (its vocabulary and idf)."""

    kind: Literal[tuple(VECTORIZERS)] = Field(
        "tfidf", description="tfidf (TfidfVectorizer: idf-weighted, rows of unit norm) or "
        "count (CountVectorizer: term counts).")
    lowercase: bool = Field(True, description="Lower-case the text first.")
    ngram_range: list[int] = Field(
        [1, 1], min_length=2, max_length=2,
        description="Word n-grams from n = first to second ([1, 2]: words and word pairs).")
    min_df: int | float = Field(
        1, gt=0, description="Drop terms in fewer documents than this (a share when < 1.0).")
    max_df: int | float = Field(
        1.0, gt=0, description="Drop terms in more documents than this (a share when <= "
        "1.0).")
    max_features: int | None = Field(
        None, ge=1, description="Keep the most frequent terms only (null: all).")
    stop_words: Literal["english"] | None = Field(
        None, description="english: drop scikit-learn's English stop words.")
    binary: bool = Field(False, description="Count a term once per document.")
    sublinear_tf: bool = Field(False, description="tfidf: 1 + log(tf) in place of tf.")

    @model_validator(mode="after")
    def _ngram_range_ordered(self) -> VectorizerConfig:
        low, high = self.ngram_range
        if not 1 <= low <= high:
            raise ValueError(f"ngram_range must be [low, high] with 1 <= low <= high, got "
                             f"{list(self.ngram_range)}")
        return self


class TableConfig(Strict):
    """How ``format: table`` reads a CSV, TSV, Parquet or JSON Lines table: one row per
    example, a label column and a text column (or a sparse feature column)."""

    labels_column: str = Field(
        "labels", min_length=1, description="Column of label names: a list, the text of "
        "a list (['a', 'b']), or names joined by label_separator.  Optional in the tables "
        "apply-leml labels.")
    label_separator: str = Field(
        ",", min_length=1, description="Between the names of a label cell written as one "
        "string.")
    text_column: str = Field(
        "text", min_length=1, description="Column of text, turned into features by "
        "`vectorizer` (unused when features_column is set).")
    features_column: str | None = Field(
        None, description="Column of sparse features (\"3:0.5 17:1\", a mapping or a list of "
        "[index, value] pairs) or dense rows (a list of numbers), in place of text.")
    n_features: int | None = Field(
        None, ge=1, description="features_column: the feature space's width (null: the "
        "training table's largest index + 1).")
    label_list: str | None = input_path(
        "file", default=None,
        description="A file of label names, one per line: the model's labels in that order "
        "(null: the training table's names, sorted).  Names outside it are left out.")
    vectorizer: VectorizerConfig = Field(default_factory=VectorizerConfig,
                                         description="The text column's vectoriser.")

    def options(self) -> dict:
        """What the table steps read (their key): everything but the label list's path,
        whose content enters the key as a file's."""
        return self.model_dump(mode="json", exclude={"label_list"})


class DatasetConfig(Strict):
    name: str = Field(
        "bibtex",
        pattern=DATASET_NAME,
        max_length=NAME_LENGTH,
        description="Dataset name used in run names and metrics.",
    )
    format: Literal["xmc", "arff", "parquet", "table"] = Field(
        "xmc", description="Extreme Classification text, Mulan ARFF, a store-format X/Y "
        "Parquet pair, or a table (CSV, TSV, Parquet or JSON Lines: `table`)."
    )
    train: str = input_path(
        "file or folder",
        description="Training file, or a folder of its parts (xmc: *.txt, *.txt.gz; parquet: "
        "<name>.X.parquet with <name>.Y.parquet), relative to the project root.  With "
        "compute.backend dask each part is a row block read by one worker only."
    )
    test: str = input_path("file or folder",
                           description="Test file, or a folder of its parts (as train).")
    n_labels: int | None = Field(None, ge=1, description="Label count (ARFF only).")
    table: TableConfig = Field(default_factory=TableConfig,
                               description="format table: its columns and vectoriser.")
    normalize: Literal["none", "l2"] = Field(
        "none", description="Scale every row of X to unit L2 norm (train and test alike)."
    )
    validation_fraction: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of the training set held out (seeded) for validation P@1; "
        "hyperparameters are chosen on it, never on test.",
    )
    evaluate_on: Literal["test", "validation"] = Field(
        "test", description="The set the metrics and predictions are of: the test file, or "
        "the validation rows held out of train (validation_fraction > 0; the test file is "
        "then not read), for choosing hyperparameters without looking at test (an "
        "experiment's `select`).")
    propensity_a: float = Field(
        0.55, gt=0, description="A of the label propensity model of Jain, Prabhu and Varma "
        "(2016) that weighs PSP@k: their value for most data sets (0.5 for Wikipedia-LSHTC, "
        "0.6 for Amazon).")
    propensity_b: float = Field(
        1.5, ge=0, description="B of the label propensity model (PSP@k): 1.5 for most data "
        "sets (0.4 for Wikipedia-LSHTC, 2.6 for Amazon).")


    @model_validator(mode="after")
    def _validation_to_evaluate_on(self) -> DatasetConfig:
        if self.evaluate_on == "validation" and self.validation_fraction == 0:
            raise ValueError("evaluate_on validation needs validation rows: set "
                             "validation_fraction above 0")
        return self


class ModelConfig(Strict):
    """The parameters of :class:`algorithms.leml.LEML` (its defaults, its checks)."""

    loss: Literal[tuple(LOSSES)] = from_estimator(
        LEML, "loss", description="Loss: squared (0/1 targets), logistic or squared hinge "
        "(+-1 margins)."
    )
    rank: int = from_estimator(LEML, "rank", ge=1, description="k, the rank of Z = W H^T.")
    lam: float = from_estimator(LEML, "lam", gt=0, description="Regularisation lambda.")
    outer_iterations: int = from_estimator(
        LEML, "outer_iterations", ge=1, le=1000,
        description="Alternating iterations T: the most that run when tol stops earlier."
    )
    tol: float = from_estimator(
        LEML, "tol", ge=0, lt=1,
        description="Stop once an outer iteration lowers the objective by less than this, "
        "relative to the objective before it (the run's log says where and why); 0 runs "
        "all outer_iterations."
    )
    early_stopping: bool = from_estimator(
        LEML, "early_stopping",
        description="Choose the number of outer iterations on training rows held out "
        "(validation_fraction): iterate on the others while the held-out rows' P@1 rises "
        "(n_iter_no_change), then train on every row for the best number; the log says "
        "where it stopped and why."
    )
    validation_fraction: float = from_estimator(
        LEML, "validation_fraction", gt=0, lt=1,
        description="early_stopping: the share of the training rows held out (seeded by "
        "the run's seed)."
    )
    n_iter_no_change: int = from_estimator(
        LEML, "n_iter_no_change", ge=1,
        description="early_stopping: iterations without a higher held-out P@1 before the "
        "held-out pass ends."
    )
    cg_max_iter: int = from_estimator(
        LEML, "cg_max_iter", ge=1, description="CG iterations per W-step / Newton step."
    )
    cg_tol: float = from_estimator(
        LEML, "cg_tol", gt=0, lt=1, description="CG relative residual tolerance."
    )
    cg_preconditioner: Literal[PRECONDITIONERS] = from_estimator(
        LEML, "cg_preconditioner",
        description="Squared loss (missing labels too): plain CG in the W-step (the "
        "paper's), or CG preconditioned by the Hessian with X^T X kept to its diagonal (each "
        "row weighted by its share of observed labels); logistic / sq. hinge: with diagonal "
        "the auto solvers are the bound steps from a squared-loss start.",
    )
    newton_max_iter: int = from_estimator(
        LEML, "newton_max_iter", ge=1, description="Newton steps (logistic, sq. hinge)."
    )
    fit_intercept: bool = from_estimator(
        LEML, "fit_intercept", description="Add a constant feature."
    )
    h_solver: Literal[(AUTO, *H_SOLVERS)] = from_estimator(
        LEML, "h_solver",
        description="H-step Newton directions for logistic / sq. hinge: explicit per-label "
        "k x k Hessians or per-label conjugate gradient (cg_max_iter, cg_tol); or bound: "
        "newton_max_iter steps on the quadratic curvature bound; auto: bound with "
        "cg_preconditioner diagonal, else direct.",
    )
    w_solver: Literal[(AUTO, *W_SOLVERS)] = from_estimator(
        LEML, "w_solver",
        description="W-step for logistic / sq. hinge: TRON, or newton_max_iter steps on the "
        "quadratic curvature bound solved through the eigendecomposition of X^T X; auto: "
        "bound with cg_preconditioner diagonal (tron on row blocks), else tron.",
    )
    squared_init_iter: Annotated[int, Field(ge=0)] | Literal[AUTO] = from_estimator(
        LEML, "squared_init_iter",
        description="Logistic / sq. hinge: start from this many squared-loss iterations "
        "mapped to +-1 margins (needs fit_intercept; 0 = random start; auto: "
        f"{AUTO_SQUARED_INIT_ITER} with cg_preconditioner diagonal, fit_intercept and "
        "rank >= 2, else 0).",
    )
    dtype: Literal["float32", "float64"] = from_estimator(
        LEML, "dtype", description="Floating type."
    )

    def estimator(self, **params) -> LEML:
        """``LEML`` with these parameters (and ``params``, such as ``random_state``)."""
        return LEML(**self.model_dump(), **params)

    @model_validator(mode="after")
    def _the_estimator_accepts_them(self) -> ModelConfig:
        self.estimator().check_params()
        return self


#: The values of ``compute.backend``.
BACKENDS = ("local", "local-blocks", "dask")


class ComputeConfig(Strict):
    """Where a LEML run computes: the steps over the training and test rows (loading, the
    masks, the start, both half-steps with the objective, the evaluation, the predictions)
    and the solvers that drive them.

    Named for what a user decides: ``backend``, where the steps over the rows run (the whole
    data in this process, row blocks in this process, or row blocks on Dask workers);
    ``row_blocks``, how many blocks the training data is cut into; ``solvers``, which process
    runs the solvers.  What a run computes depends only on ``backend`` and ``row_blocks``
    (the steps' cache keys hold the number of blocks); ``workers``, ``address`` and
    ``solvers`` only say where, and give the same ``W`` and ``H`` bit for bit.

    The section was formerly ``w_step`` (``runner``, ``blocks``, ``workers``, ``address``,
    ``driver``): a config or a recorded run that gives it still loads, with a warning
    (:func:`compute_from_w_step`).
    """

    backend: Literal[tuple(BACKENDS)] = Field(
        "local",
        description="Where the steps over the training rows run (the W-step's products, the "
        "H-step's sums, the objective; with dask also loading, evaluation and predictions): "
        "this process on the whole data (local), the row blocks' tasks in this process "
        "without Dask (local-blocks: the same bits as dask), or Dask workers each holding its "
        "row blocks (dask).",
    )
    row_blocks: int = from_estimator(
        RowBlockBackend, "blocks", ge=1, le=256,
        description="Row blocks of the training data (local-blocks, dask), each its own store "
        "entries read by one worker; they fix the reduction order, so W, for any workers.",
    )
    workers: int = Field(
        2, ge=1, le=64,
        description="Workers of the LocalCluster started when the run has no Dask cluster.",
    )
    address: str | None = Field(
        None,
        description="Scheduler of an existing Dask cluster (tcp://host:8786); none: the run's "
        "own cluster (--dask-address, or --runner dask's), else a LocalCluster of `workers`.",
    )
    solvers: Literal["flow", "worker"] = Field(
        "flow",
        description="backend dask: where the solvers run (the conjugate gradient over the "
        "W-step's d' x k vectors, the H-step's solves, the scoring): in the flow's process "
        "(flow: a worker lost under a W-step costs only its blocks) or whole on a worker "
        "(worker: the flow's process holds no factor; losing that worker restarts the step "
        "on another).",
    )

    @property
    def blocked(self) -> bool:
        """Whether the steps run over row blocks (``local-blocks`` or ``dask``)."""
        return self.backend != "local"

    def cluster(self, ctx: RunContext) -> dict | None:
        """The ``cluster`` argument of the row-block tasks, where they run (a runtime
        parameter, outside their cache keys): None for ``local``; ``{"in_process": True}``
        for ``local-blocks`` (no Dask); for ``dask`` the scheduler address (``address``, else
        the run's ``--dask-address``; none: the task runner's cluster, else a LocalCluster of
        ``workers``) and where the solvers run."""
        if self.backend == "local":
            return None
        if self.backend == "local-blocks":
            return {"in_process": True}
        return {"address": self.address or ctx.options.dask_address, "workers": self.workers,
                "solvers": self.solvers}

    @model_validator(mode="after")
    def _solvers_on_a_worker_need_dask(self) -> ComputeConfig:
        if self.solvers != "flow" and self.backend != "dask":
            raise ValueError(f"solvers {self.solvers!r} needs backend 'dask' (backend is "
                             f"{self.backend!r})")
        return self


#: The fewest held-out rows (and rows left to fit) any tuning split may have (tune.when always):
#: fewer scores a setting on too few rows to tell settings apart at all.
MIN_TUNING_ROWS = 10

#: sha256 of the training files LEML's bundled defaults were chosen on (the validation rows of
#: Bibtex's and Delicious's two public splits: configs/experiments/leml-defaults.yaml): a run
#: on one of them keeps the defaults (tune.when auto).
DEFAULTS_CHOSEN_ON = (
    "b7b45ee0e2ecc7c945ba56b5ba544557fb3ceafffce4892b02530ea03462163d",  # bibtex xmlrepo
    "e96095e30ada1bd9af93e33fa3a4081560d262299e9b04d782b0d19b01265fc9",  # bibtex mulan
    "c1638e10f129750218f89346bc56502b48e7b3c9affaa2b9e46eec86467de430",  # delicious xmlrepo
    "97c0a851364df50b703d2fa713b9cad1a36f25e89a5bfb48d62d0c14e3dbf4ae",  # delicious mulan
)


class TuneConfig(Strict):
    """Settings chosen on the user's own data: held-out training rows score a small grid, the
    best setting is trained on every training row."""

    when: Literal["auto", "always", "never"] = Field(
        "auto", description="auto: tune unless the training file is one the bundled defaults "
        "were chosen on (chosen_on), a folder of parts, or too small to hold out min_rows; "
        "always; never (the model values as given).")
    validation_fraction: float = Field(
        0.2, gt=0, lt=1, description="The share of the training rows held out to score the "
        "grid (drawn from the run's seed).")
    min_rows: int = Field(
        200, ge=MIN_TUNING_ROWS, description="auto tunes only when it holds out at least "
        "this many rows: on fewer, P@1 cannot tell apart settings a few points apart (its "
        "standard error is near 3.5 points at 200 rows).")
    metric: Literal["precision@1", "precision@3", "precision@5"] = Field(
        "precision@1", description="What the held-out rows score each setting by.")
    rank: list[int] = Field(
        [50, 150, 300], min_length=1, description="The ranks tried (a rank beyond the labels "
        "or the features is tried at their number, once): the default's, a third of it and "
        "twice it.")
    lam: list[float] = Field(
        [0.3, 1.0, 3.0], min_length=1, description="The lambdas tried: the default's, and a "
        "factor of about 3 either side.")
    chosen_on: list[str] = Field(
        default_factory=lambda: list(DEFAULTS_CHOSEN_ON),
        description="sha256 of the training files the bundled defaults were chosen on (when "
        "auto, a run on one of them is not tuned).")

    @field_validator("rank")
    @classmethod
    def _ranks(cls, v: list[int]) -> list[int]:
        if any(r < 1 for r in v):
            raise ValueError("ranks are positive")
        return v

    @field_validator("lam")
    @classmethod
    def _lams(cls, v: list[float]) -> list[float]:
        if any(not 0 < x < float("inf") for x in v):
            raise ValueError("lambdas are positive and finite")
        return v


class LemlConfig(FlowConfig):
    dataset: DatasetConfig
    model: ModelConfig = ModelConfig()
    tune: TuneConfig = Field(
        default_factory=TuneConfig,
        description="Rank and lambda chosen on held-out rows of the user's own training data "
        "(tune.when: auto) before the model is trained on every row.")
    observed_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of label-matrix entries observed (uniform, seeded); 1 = all.",
    )
    baselines: list[Literal[tuple(BASELINES)]] = Field(
        default_factory=list, description="Baselines trained on the same observed entries."
    )
    baseline_alpha: float = from_estimator(
        BinaryRelevance, "alpha", gt=0, description="Ridge / inverse-C strength of the baselines."
    )
    compute: ComputeConfig = Field(
        default_factory=ComputeConfig,
        description="Where the run computes: this process, or row blocks here or on Dask "
        "workers (formerly w_step).",
    )
    batch_size: int = Field(
        BATCH_SIZE, ge=1, description="Rows scored at a time in evaluation."
    )

    @model_validator(mode="before")
    @classmethod
    def _former_w_step(cls, data):
        return compute_from_w_step(data) if isinstance(data, dict) else data

    @classmethod
    def renamed_key(cls, keys: list[str], value: Any) -> tuple[list[str], Any]:
        """``--set w_step.blocks=4`` (or the whole ``w_step``) is set as the ``compute`` key it
        became, with a :class:`FutureWarning`."""
        return leml_renamed_key(keys, value)

    @model_validator(mode="after")
    def _model_can_run_on_row_blocks(self) -> LemlConfig:
        if self.compute.blocked:
            self.model.estimator().check_params(distributed=True)
        return self

    @model_validator(mode="after")
    def _closed_form_needs_full_labels(self) -> LemlConfig:
        if "closed-form" in self.baselines and self.observed_fraction < 1:
            raise ValueError("baselines: closed-form needs observed_fraction = 1")
        return self

    def check_before_run(self, runs: Path, store: Path) -> None:
        """The input paths, then what the files' heads tell (:func:`check_data`)."""
        super().check_before_run(runs, store)
        check_data(self)


@flow(name="leml", flow_run_name=namer("leml"))
def leml_flow(config: LemlConfig, options: RunOptions | None = None) -> dict:
    """load -> (alternate-W -> alternate-H) x T -> evaluate -> predict: the steps of
    :class:`algorithms.leml.LEML` as tasks, with the optional validation split, missing-label
    mask and baselines; the model and the test set's predictions as named outputs.  The Dask
    clients the run opened and the row blocks it kept are closed when it ends, however it
    ends (:data:`tasks.leml_dask.CLIENTS`)."""
    try:
        return _leml_run(config, options)
    finally:
        CLIENTS.close()


def _leml_run(config: LemlConfig, options: RunOptions | None) -> dict:
    """The body of :func:`leml_flow`."""
    check_input_paths(config)  # a missing input refused before any step (a rerun, a grid point)
    ctx = RunContext.open("leml", config, options)
    d, m, seed, batch = config.dataset, config.model, config.seed, config.batch_size
    compute = config.compute
    model = m.estimator(random_state=seed)
    # "auto" resolved once, logged with any setting that turns off what another relies on;
    # the steps and their keys then hold the values they run with.
    model.set_params(**model.resolve_params(distributed=compute.blocked))
    cluster = compute.cluster(ctx)
    # With the dask backend the steps over the data (loading, masks, partitions) run on the
    # cluster too: the flow's process holds none of it.
    data_cluster = cluster if compute.backend == "dask" else None
    files = check_data(config)
    on_test = d.evaluate_on == "test"
    train_parts = _load_parts(ctx, d, m, files["train"], data_cluster,
                              labelled=len(files["train"]) == 1)
    # The rows to fit, counted from the heads above where they tell (XC, Parquet); an ARFF
    # file or a table tells only once read: checked here, before anything is learned.
    check_training_rows(sum(ctx.store.shape(p["X"])[0] for p in train_parts),
                        d.validation_fraction if len(train_parts) == 1 else 0.0,
                        ctx.path(d.train))
    # The test set's metrics need its labels: a test file without any is refused as it is
    # read; the parts of a folder once all are (a part alone may have none).
    test_parts = (_load_parts(ctx, d, m, files["test"], data_cluster,
                              labelled=len(files["test"]) == 1) if on_test else None)
    for which, parts in (("train", train_parts), ("test", test_parts)):
        if parts is not None and len(parts) > 1:
            check_parts([ctx.store.path(p["X"]) for p in parts],
                        [ctx.store.path(p["Y"]) for p in parts], ctx.path(getattr(d, which)),
                        key=f"dataset.{which}")
    train_file = train_parts[0]  # its index maps name the model's columns
    folder = len(train_parts) > 1 or ctx.path(d.train).is_dir()
    blocked = compute.blocked
    # The whole training set in this process is needed by the local backend and the
    # baselines; else the steps take the files of the row blocks instead and read none of
    # the data (the workers do).
    tuning = _tunes(ctx, config, files["train"], folder,
                    sum(ctx.store.shape(p["X"])[0] for p in train_parts))
    whole = not blocked or bool(config.baselines) or tuning
    data, validation, blocks = _training(ctx, config, train_parts, folder, whole, data_cluster)
    if not on_test:  # the metrics and predictions of the held-out rows; test is not read
        test_parts = [validation]
    iterations = m.outer_iterations
    if tuning:  # rank, lambda and the iterations chosen on rows held out of train
        iterations = _tune(ctx, config, model, data, data_cluster)
    elif m.early_stopping:  # the number of iterations chosen on rows held out of train
        iterations = _early_stopping(ctx, config, model, data, folder, data_cluster, cluster)
    place = _place(ctx, config, data, validation, blocks if folder else None, data_cluster)
    factors, traces, timings = _alternate(ctx, model, place, iterations, cluster)
    w_data = place["w_data"]
    if blocked:  # where the last W-step ran, for the manifest
        where = ctx.read(timings[-2]).iloc[0]
        ctx.record.note("w_step", {"scheduler": where["scheduler"],
                                   "workers": int(where["workers"])})
    # PSP@k's weights, from the training labels the model sees (the observed ones)
    weights = ctx.run(propensity, **w_data, a=d.propensity_a,
                      b=d.propensity_b, cluster=data_cluster)
    test_blocks = test = None
    if blocked:  # the test set's row blocks: the parts of a folder, else row_blocks of them
        test_blocks = ([_xy(p) for p in test_parts] if len(test_parts) > 1 else
                       _partition(ctx, {"train": _xy(test_parts[0]), "mask": None},
                                  compute.row_blocks, data_cluster))
    if not blocked or config.baselines:
        test = _stacked(ctx, test_parts)
    here = None if test_blocks else test  # the test set scored in this process
    result = ctx.run(evaluate, test=here, **factors, traces=traces, timings=timings,
                     propensity=weights, dataset=d.name,
                     method=f"leml-{model.loss}-k{model.rank}",
                     params=task_params(model, evaluate), batch_size=batch,
                     partition=test_blocks, cluster=cluster)
    tables = [result["metrics"]] + [
        ctx.run(baseline, **data, test=test, propensity=weights, method=name,
                dataset=d.name, batch_size=batch,
                params=baseline_params(name, alpha=config.baseline_alpha, rank=model.rank))
        for name in config.baselines]
    metrics = ctx.run(collect, tables=tables)
    predictions = ctx.run(predict, test=here, **factors, labels=train_file["labels"],
                          params=task_params(model, predict), top_k=TOP_K, batch_size=batch,
                          partition=test_blocks, cluster=cluster)
    name_outputs(ctx, config, model, factors, train_file, predictions, weights)
    publish(ctx, config, ctx.read(metrics), ctx.read(result["convergence"]), model, tuning)
    return ctx.finish(metrics, headline=headline(ctx.read(metrics)))


def _place(ctx: RunContext, config: LemlConfig, data: dict, validation: dict | None,
           blocks: list[dict] | None, cluster: dict | None) -> dict:
    """Where the iterations find their data: ``w_data`` (the training refs, or over row
    blocks the blocks' files in their place: ``blocks``, the parts of a folder, else the data
    cut into ``compute.row_blocks`` blocks on ``cluster``), ``row_blocks`` (their number, or
    None), and the validation refs scored in this process or, on Dask, their row blocks."""
    compute = config.compute
    if not compute.blocked:
        return {"w_data": data, "row_blocks": None, "validation": validation,
                "validation_blocks": None}
    if blocks is None:
        blocks = _partition(ctx, data, compute.row_blocks, cluster)
    validation_blocks = None
    if validation is not None:  # its P@1 on the workers too, from its row blocks
        validation_blocks = _partition(ctx, {"train": validation, "mask": None},
                                       compute.row_blocks, cluster)
    return {"w_data": {"train": None, "mask": None, "partition": blocks},
            "row_blocks": len(blocks), "validation": None, "validation_blocks": validation_blocks}


def _alternate(ctx: RunContext, model: LEML, place: dict, iterations: int,
               cluster: dict | None, stop=None, what: str = "Outer iterations",
               key: str = "iterations") -> tuple[dict, list, list]:
    """The start, then (alternate-W, alternate-H) up to ``iterations`` times: the last factors'
    refs, the iterations' trace refs and timing refs.

    After each iteration the loop ends when ``stop(traces)`` (the trace tables read so far)
    gives a reason, and when the estimator's ``tol`` rule says so (:meth:`LEML.converged`),
    as :meth:`LEML.fit` ends."""
    w_data, row_blocks = place["w_data"], place["row_blocks"]
    # The squared-loss start of a margin loss (model.squared_init_iter) runs on the W-step's
    # row blocks, as the iterations do.
    factors = ctx.run(initialise, **w_data, params=task_params(model, initialise),
                      row_blocks=row_blocks if model.squared_start() else None,
                      cluster=cluster)
    w_params, h_params = task_params(model, alternate_W), task_params(model, alternate_H)
    progress = ctx.artifacts.progress(key, iterations, f"{what} (of {iterations})")
    traces, timings, read = [], [], []
    try:
        for t in range(1, iterations + 1):
            w = ctx.run(alternate_W, **w_data, **factors, iteration=t, params=w_params,
                        row_blocks=row_blocks, cluster=cluster)
            h = ctx.run(alternate_H, **w_data, W=w["W"], H=factors["H"],
                        validation=place["validation"],
                        validation_partition=place["validation_blocks"], iteration=t,
                        params=h_params, row_blocks=row_blocks, cluster=cluster)
            factors = {"W": w["W"], "H": h["H"]}
            traces.append(h["trace"])
            timings += [w["timings"], h["timings"]]
            progress.advance()
            if model.tol or stop is not None:  # the estimator's own rules, as its fit asks
                read.append(ctx.read(h["trace"]).iloc[0])
                if model.converged([r["objective"] for r in read]) is not None or (
                        stop is not None and stop(read) is not None):
                    break
    finally:  # the training data the steps kept between them (see tasks.leml._prepared)
        release_training_data()
    return factors, traces, timings


def _tunes(ctx: RunContext, config: LemlConfig, train: list, folder: bool,
           n_rows: int) -> bool:
    """Whether the run tunes (``tune.when``), said in the log when ``auto`` decides not to;
    ``n_rows``: the training rows."""
    t = config.tune
    if t.when == "never":
        return False
    if folder:
        if t.when == "always":
            raise InputError("tuning holds out rows of one training file; a folder of parts is "
                             "read part by part: give a file, or tune.when never",
                             path=ctx.path(config.dataset.train), key="tune.when")
        return _not_tuned(ctx, "a folder of parts (tune.when auto)")
    if t.when == "auto" and cached_file_sha256(train[0]) in set(t.chosen_on):
        return _not_tuned(ctx, "the bundled defaults were chosen on this training file "
                          "(tune.chosen_on); tune.when always tunes it too")
    held = round(t.validation_fraction * n_rows)
    if t.when == "auto" and held < t.min_rows:
        return _not_tuned(ctx, f"{held:,} held-out rows of {n_rows:,} are fewer than "
                          f"tune.min_rows {t.min_rows} (tune.when always tunes anyway)")
    return True


def _not_tuned(ctx: RunContext, why: str) -> bool:
    """Say why ``tune.when auto`` keeps the config's values (the log and the manifest's
    notes); False."""
    log_both(logging.INFO, f"not tuned: {why}")
    ctx.record.note("tuning", f"not tuned: {why}")
    return False


def _tune(ctx: RunContext, config: LemlConfig, model: LEML, data: dict,
          cluster: dict | None) -> int:
    """Rank and lambda chosen on held-out training rows (``leml-tune``, each setting from a
    fresh start while the held-out score rises, :meth:`LEML.held_out_pass`), set on
    ``model``, a logged decision with the validation table as an artifact; returns the
    number of iterations the chosen setting's held-out score peaked at (the final training
    on every row runs that many)."""
    import time

    t = config.tune
    params = {k: v for k, v in model.get_params().items() if k not in ("callback", "verbose")}
    params.update(early_stopping=False, random_state=config.seed)
    split_params = {"validation_fraction": t.validation_fraction, "random_state": config.seed}
    n_rows, n_labels = ctx.store.shape(data["train"]["Y"])
    n_features = ctx.store.shape(data["train"]["X"])[1] + int(bool(model.fit_intercept))
    held = round(t.validation_fraction * n_rows)
    if held < MIN_TUNING_ROWS or n_rows - held < MIN_TUNING_ROWS:
        raise InputError(f"tune.validation_fraction {t.validation_fraction:g} of {n_rows:,} "
                         f"training rows holds out {held:,}: tuning needs at least "
                         f"{MIN_TUNING_ROWS} rows on each side (or tune.when never)",
                         key="tune.validation_fraction")
    parts = ctx.run(early_split, train=data["train"], mask=data["mask"], params=split_params,
                    cluster=cluster)
    mask = None if data["mask"] is None else ctx.run(
        early_split_mask, mask=data["mask"], params=split_params, cluster=cluster)
    grid = tuning_grid(t.rank, t.lam, min(n_features, n_labels))
    started = time.perf_counter()
    result = ctx.run(tune, train={"X": parts["X_fit"], "Y": parts["Y_fit"]}, mask=mask,
                     validation={"X": parts["X_val"], "Y": parts["Y_val"]}, params=params,
                     grid=grid, k=int(t.metric.rsplit("@", 1)[1]))
    seconds = time.perf_counter() - started
    table = ctx.read(result["table"])
    best = table.loc[table["chosen"]].iloc[0]
    chosen = {"rank": int(best["rank"]), "lam": float(best["lam"])}
    iterations = int(best["best_iteration"])
    model.set_params(**chosen, outer_iterations=iterations, early_stopping=False)
    ctx.artifacts.table("tuning", result["table"],
                         f"Each setting's {t.metric} on {held:,} held-out training rows")
    ctx.record.name_output("tuning.parquet", result["table"])
    ctx.record.decide(
        "tuned", {**chosen, "outer_iterations": iterations},
        f"the best {t.metric} of {len(grid)} settings on {held:,} held-out training rows "
        f"(tune.validation_fraction {t.validation_fraction:g}), {float(best['score']):.4f} "
        f"after {iterations} iterations, in {seconds:.1f} s; then every training row with "
        "them (tune.when never keeps the config's values)")
    return iterations


def tuning_grid(ranks: list[int], lams: list[float], most: int) -> list[dict]:
    """The settings a tuning tries: every rank (a rank beyond ``most``, the features with the
    intercept or the labels, tried at ``most``, once) with every lambda, in order."""
    seen = list(dict.fromkeys(min(int(r), int(most)) for r in ranks))
    return [{"rank": r, "lam": float(lam)} for r in seen for lam in lams]


def _early_stopping(ctx: RunContext, config: LemlConfig, model: LEML, data: dict,
                    folder: bool, data_cluster: dict | None, cluster: dict | None) -> int:
    """The held-out pass of ``model.early_stopping`` (:meth:`LEML.fit` with it): the rows
    the estimator holds out (``leml-early-split``, its own split), the alternation on the
    others while the held-out P@1 rises (:meth:`LEML.no_gain`), and the best number of
    iterations, a logged decision."""
    m = config.model
    if folder:
        raise InputError("early stopping holds out rows of one training file; a folder of "
                         "parts is read part by part: turn it off (false) or give a file",
                         path=ctx.path(config.dataset.train), key="model.early_stopping")
    params = task_params(model, early_split)
    parts = ctx.run(early_split, train=data["train"], mask=data["mask"], params=params,
                    cluster=data_cluster)
    mask = None if data["mask"] is None else ctx.run(
        early_split_mask, mask=data["mask"], params=params, cluster=data_cluster)
    fit = {"train": {"X": parts["X_fit"], "Y": parts["Y_fit"]}, "mask": mask}
    held = {"X": parts["X_val"], "Y": parts["Y_val"]}
    place = _place(ctx, config, fit, held, None, data_cluster)
    ended: list[str] = []

    def stop(read: list) -> str | None:
        reason = model.no_gain([r["validation_p_at_1"] for r in read])
        ended[:] = [reason] if reason else []
        return reason

    _, traces, _ = _alternate(ctx, model, place, m.outer_iterations, cluster, stop,
                              "Early stopping: iterations on the rows not held out",
                              key="early-stopping")
    scores = [float(ctx.read(t)["validation_p_at_1"].iloc[0]) for t in traces]
    best = model.best_iteration(scores)
    why = ended[0] if ended else (
        model.converged([float(ctx.read(t)["objective"].iloc[0]) for t in traces])
        or f"model.outer_iterations = {m.outer_iterations} reached")
    held_rows = ctx.store.shape(parts["X_val"])[0]
    ctx.record.decide("outer iterations", best,
                      f"model.early_stopping on {held_rows:,} held-out training rows "
                      f"(model.validation_fraction {m.validation_fraction:g}): {why}; then "
                      f"every training row for {best} iterations")
    ctx.record.note("early_stopping", {"validation_p_at_1": scores, "best_iteration": best})
    return best


def _training(ctx: RunContext, config: LemlConfig, parts: list[dict], folder: bool,
              whole: bool, cluster: dict | None) -> tuple[dict, dict | None, list[dict] | None]:
    """The training data (``{"train", "mask"}`` refs; ``train`` None when the whole is not
    ``whole``-ly needed), the validation refs (or None) and, for a folder of ``parts``, the
    row blocks the parts are (per part its X, Y and mask refs; None for one file).

    One file: the validation rows held out of it, then the mask drawn over the rest.  A
    folder: each part's mask drawn from (seed, part), the parts stacked only when the whole
    is needed; no validation split (refused).  ``cluster``: where the split and the masks
    are made."""
    d, seed = config.dataset, config.seed
    if not folder:
        train, validation = _hold_out(ctx, _xy(parts[0]), d.validation_fraction, seed, cluster)
        mask = None
        if config.observed_fraction < 1:
            mask = ctx.run(observe, Y=train["Y"], observed_fraction=config.observed_fraction,
                           seed=seed, cluster=cluster)
        return {"train": train, "mask": mask}, validation, None
    if d.validation_fraction > 0:
        raise InputError("a folder of parts is read part by part; hold out validation rows in "
                         "a file of their own (validation_fraction 0 here)",
                         path=ctx.path(d.train), key="dataset.validation_fraction")
    masks = [None] * len(parts)
    if config.observed_fraction < 1:
        masks = [ctx.run(observe, Y=p["Y"], observed_fraction=config.observed_fraction,
                         seed=seed, part=i, cluster=cluster) for i, p in enumerate(parts)]
    blocks = [{"X": p["X"], "Y": p["Y"], **({} if mk is None else {"mask": mk})}
              for p, mk in zip(parts, masks, strict=True)]
    train = _stacked(ctx, parts) if whole else None
    mask = None if masks[0] is None or not whole else ctx.run(stack, parts=masks, what="mask")
    return {"train": train, "mask": mask}, None, blocks


def check_data(config: LemlConfig) -> dict[str, list[Path]]:
    """What the input files tell before any is read in full, checked before the flow's first
    step and before a command starts its server (:meth:`LemlConfig.check_before_run`): the
    parts of a folder; the heads' numbers of features and labels agree, the training rows
    are enough and the factors fit (:func:`tasks.leml.check_inputs`); of a table, its columns
    and the label cells of the training table's head (its space is learned from the
    training table: :func:`tasks.leml_table.check_table_labels`).  Returns the files of
    ``train`` and ``test`` (a file, or the parts of a folder)."""
    d = config.dataset
    files = {which: _input_files(d, which) for which in ("train", "test")}
    on_test = d.evaluate_on == "test"
    if d.format != "table":
        check_inputs(config.model.estimator(random_state=config.seed), files, d.format,
                     d.n_labels, fully_observed=config.observed_fraction == 1,
                     validation_fraction=d.validation_fraction)
        return files
    table = d.table.options()
    check_table_columns({f"dataset.{which}": files[which]
                         for which in (("train", "test") if on_test else ("train",))}, table)
    label_list = d.table.label_list
    check_table_labels(files["train"][0], table, known=None if label_list is None else
                       read_label_list(resolve_path(label_list)))
    return files


def _input_files(d: DatasetConfig, which: str) -> list:
    """The files of ``dataset.train`` or ``dataset.test`` (``which``): the file, or the parts
    of a folder of parts (:func:`tasks.leml.input_parts`)."""
    path = resolve_path(getattr(d, which))
    return input_parts(path, d.format, key=f"dataset.{which}") or [path]


def _load_parts(ctx: RunContext, d: DatasetConfig, m: ModelConfig, files: list,
                cluster: dict | None, labelled: bool = False) -> list[dict]:
    """The ``leml-load`` refs of ``files`` (of :func:`_input_files`, already checked to
    agree on the numbers of features and labels by :func:`tasks.leml.check_inputs`), each
    read on its own (on ``cluster`` when given); ``labelled``: the one file is the training
    set, refused when no point has a label (a part of a folder may have none)."""
    if d.format == "table":
        return _load_tables(ctx, d, m, files, labelled)
    read = dict(format=d.format, dtype=m.dtype, n_labels=d.n_labels, normalize=d.normalize)
    return [ctx.run(load, path=f, labels_file=label_file(f, d.format), cluster=cluster,
                    labelled=labelled, **read) for f in files]


def _load_tables(ctx: RunContext, d: DatasetConfig, m: ModelConfig, files: list,
                 labelled: bool) -> list[dict]:
    """The ``leml-load-table`` refs of the tables ``files`` in the training table's space
    (``leml-table-space``: its labels and vectoriser, learned from the training table only),
    with the space's refs as each file's index maps, as :func:`_load_parts` gives them."""
    train = ctx.path(d.train)
    label_list = None if d.table.label_list is None else ctx.path(d.table.label_list)
    space = ctx.run(table_space, path=train, table=d.table.options(), label_list=label_list)
    maps = {part: ctx.store.path(space[part]) for part in ("features", "labels")}
    loaded = [ctx.run(load_table, path=f, table=d.table.options(), dtype=m.dtype,
                      normalize=d.normalize, labelled=labelled, **maps) for f in files]
    return [{**xy, "features": space["features"], "labels": space["labels"]}
            for xy in loaded]


def _stacked(ctx: RunContext, parts: list[dict]) -> dict:
    """The X and Y refs of the loaded ``parts`` as one data set: the one part's own, or
    their rows stacked in part order (``leml-stack``)."""
    if len(parts) == 1:
        return _xy(parts[0])
    return {name: ctx.run(stack, parts=[p[name] for p in parts], what=name)
            for name in ("X", "Y")}


def _partition(ctx: RunContext, data: dict, blocks: int, cluster: dict | None) -> list[dict]:
    """The training data as row blocks (``leml-partition``, one task and one set of store
    entries per block, run on ``cluster`` when given): per block the refs of its rows of X,
    Y and the mask."""
    n_rows = ctx.store.shape(data["train"]["X"])[0]
    count = len(row_block_bounds(n_rows, blocks))
    train = unmapped(data["train"])
    if data["mask"] is None:
        return ctx.map(partition, train=train, block=list(range(count)), blocks=blocks,
                       cluster=unmapped(cluster))
    return ctx.map(partition_masked, train=train, mask=unmapped(data["mask"]),
                   block=list(range(count)), blocks=blocks, cluster=unmapped(cluster))


def _xy(loaded: dict) -> dict:
    """The X and Y refs of a loaded file (what the learning steps take)."""
    return {"X": loaded["X"], "Y": loaded["Y"]}


def name_outputs(ctx: RunContext, config: LemlConfig, model: LEML, factors: dict,
                 train_file: dict, predictions: str, weights: str) -> None:
    """The run's named outputs: ``predictions.parquet`` and the model, ``model/`` (see
    ``docs/leml.md``, "Outputs and model format").

    The Parquet files are the store entries of the final ``W`` and ``H``, of the training
    file's index maps, of the labels' inverse propensities (apply's PSP@k) and of the
    predictions; ``model/config.json`` is the run's config and
    ``model/model.json`` (:func:`flows.apply.model_document`, version :data:`MODEL_VERSION`)
    what ``apply-leml`` needs to use them: the factors' shapes, the prediction parameters and
    how the input is read (format, dtype, row normalisation), and every parameter of the
    estimator ``model`` the run trained (``params``), so that a loaded model's estimator is
    the run's (``sklearn.base.clone`` of it trains the same).
    """
    m, d = config.model, config.dataset
    shapes = {part: list(ctx.store.shape(factors[part])) for part in ("W", "H")}
    refs = {"W": factors["W"], "H": factors["H"], "features": train_file["features"],
            "labels": train_file["labels"], "propensity": weights}
    for part, ref in refs.items():
        ctx.record.name_output(f"{MODEL_DIR}/{MODEL_FILES[part]}", ref)
    ctx.record.name_output("predictions.parquet", predictions)
    ctx.record.write_output(f"{MODEL_DIR}/{MODEL_FILES['config']}",
                     json.dumps(config.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    ctx.record.write_output(f"{MODEL_DIR}/model.json", model_document(
        "leml", MODEL_VERSION, rank=shapes["W"][1], loss=m.loss, dtype=m.dtype,
        n_features=shapes["W"][0] - int(m.fit_intercept), n_labels=shapes["H"][0],
        fit_intercept=m.fit_intercept, normalize=d.normalize, input_format=d.format,
        shapes=shapes, files=MODEL_FILES, params=estimator_params(model),
        **({"table": d.table.options()} if d.format == "table" else {})))


def estimator_params(model: LEML) -> dict:
    """The estimator's parameters as ``model.json`` records them: every one but the
    ``callback`` (code, not a setting)."""
    return {k: v for k, v in model.get_params().items() if k != "callback"}


def _hold_out(ctx: RunContext, train: dict, fraction: float, seed: int,
              cluster: dict | None = None):
    """The training refs and the validation refs held out of them (None when none are);
    the split made on ``cluster`` when given."""
    if fraction == 0:
        return train, None
    parts = ctx.run(split, train=train, validation_fraction=fraction, seed=seed,
                    cluster=cluster)
    return ({"X": parts["X_fit"], "Y": parts["Y_fit"]},
            {"X": parts["X_val"], "Y": parts["Y_val"]})


def publish(ctx: RunContext, config: LemlConfig, metrics: pd.DataFrame,
            convergence: pd.DataFrame, model: LEML | None = None, tuned: bool = False) -> None:
    """The run's artifacts: the convergence table, the objective plot and the summary.

    Parameters
    ----------
    ctx : RunContext
        The run.
    config : LemlConfig
        Its config.
    metrics : DataFrame
        The ``metrics`` table of ``leml-collect`` (LEML's rows and the baselines').
    convergence : DataFrame
        The ``convergence`` table of ``leml-evaluate``; its ``validation_p_at_1`` column, all
        NaN without a validation split, is shown only when it holds a value.
    model : LEML, optional
        The estimator the run trained (its values tuned, ``tuned``); default: the config's.
    """
    m = model if model is not None else config.model.estimator()
    convergence = shown_convergence(convergence)
    validated = VALIDATION_COLUMN in convergence.columns
    objective = convergence.sort_values("iteration")["objective"].to_numpy(dtype=float)
    if objective.size:
        change = ((objective[-2] - objective[-1]) / abs(objective[-2])
                  if objective.size > 1 and objective[-2] else float("nan"))
        seen = (f"; validation P@1 {100 * convergence[VALIDATION_COLUMN].iloc[-1]:.2f}"
                if validated else "")
        stopped = m.converged(objective)
        why = (f"model.tol: {stopped}" if stopped else
               f"model.outer_iterations = {m.outer_iterations} reached, last relative change "
               f"{change:.2e}" + (f" (tol {m.tol:g} not met)" if m.tol else " (tol 0: no "
                                  "early stopping)"))
        # else a held-out pass (early stopping, tuning) decided the count, its own line
        if not (config.model.early_stopping or tuned) or stopped:
            ctx.record.decide("outer iterations", int(objective.size),
                              f"{why}: objective {objective[0]:.6g} -> {objective[-1]:.6g}"
                              f"{seen}")
    ctx.artifacts.table("convergence", convergence,
                         "Objective, seconds and validation P@1 per outer iteration" if validated
                         else "Objective and seconds per outer iteration")
    title = f"LEML on {config.dataset.name}: k={m.rank}, lambda={m.lam:g}, {m.loss} loss"
    png = ctx.artifacts.plot(plots.leml_convergence, convergence, title=title)
    ctx.artifacts.image("objective", png,
                        "Objective and validation P@1 over outer iterations" if validated
                        else "Objective over outer iterations")
    ctx.artifacts.markdown("summary", summary_markdown(metrics, convergence, config, m),
                           "The run beside the published LEML row (Extreme Classification "
                           "Repository)")


#: The convergence table's column of validation P@1 (NaN without a validation split).
VALIDATION_COLUMN = "validation_p_at_1"


def shown_convergence(conv: pd.DataFrame) -> pd.DataFrame:
    """``conv`` without its validation P@1 column when that holds no finite value (no
    validation split): no column of blanks or ``nan`` in what the UI shows."""
    if VALIDATION_COLUMN in conv.columns:
        values = pd.to_numeric(conv[VALIDATION_COLUMN], errors="coerce")
        if values.replace([float("inf"), float("-inf")], float("nan")).isna().all():
            return conv.drop(columns=VALIDATION_COLUMN)
    return conv


def summary_markdown(metrics: pd.DataFrame, conv: pd.DataFrame, config: LemlConfig,
                     model: LEML | None = None) -> str:
    """The run against the published LEML row, and the objective over iterations.

    Parameters
    ----------
    metrics : DataFrame
        ``dataset``, ``method``, ``metric``, ``value``: LEML's rows and the baselines'.
    conv : DataFrame
        The convergence table (a validation P@1 column without values is left out).
    config : LemlConfig
        The run's config.
    model : LEML, optional
        The estimator the run trained (tuned values); default: the config's.

    Returns
    -------
    str
        Markdown: the metrics, with the published LEML figure beside LEML's own rows only (a
        baseline is not LEML) and only when every label is observed; the published rows; the
        objective as a sparkline and the convergence table.
    """
    conv = shown_convergence(conv)
    m = model if model is not None else config.model.estimator()
    lines = [
        f"# LEML on {config.dataset.name}",
        "",
        f"rank {m.rank}, lambda {m.lam}, loss {m.loss}, "
        f"observed {config.observed_fraction:.0%}, seed {config.seed}",
        "",
        "| method | metric | value | published LEML |",
        "| --- | --- | --- | --- |",
    ]
    published = PUBLISHED.get(config.dataset.name, {})
    for row in metrics.itertuples(index=False):
        own = row.method not in BASELINES  # LEML's rows; the baselines' are named by BASELINES
        ref = published.get(row.metric) if own and config.observed_fraction == 1 else None
        shown = (
            f"{100 * row.value:.2f}" if row.metric.startswith("precision@") else f"{row.value:.4f}"
        )
        lines.append(f"| {row.method} | {row.metric} | {shown} | {'' if ref is None else ref} |")
    from scarce.flows.registry import FLOWS

    leader = lead_line(metrics, FLOWS["leml"])
    lines += ([] if leader is None else ["", f"**{leader}.**"]) + [
        "",
        "Published LEML (Extreme Classification Repository, P@1 / P@3 / P@5 in %): "
        + "; ".join(
            f"{name.capitalize()} " + " / ".join(f"{v:.2f}" for v in row.values())
            for name, row in PUBLISHED.items()
        )
        + ". Comparable only on the repository's split with every label observed.",
        "",
        "Objective per outer iteration: " + sparkline(conv["objective"].tolist()),
        "",
        markdown_table(conv),
    ]
    return "\n".join(lines)


#: The metrics of a run's headline (``scarce runs``), in this order, for every method.
HEADLINE = ("precision@1", "precision@3", "precision@5", "instance_auc")


def headline(metrics) -> dict[str, float]:
    """P@1, P@3, P@5 and AUC of every method (in the table's order), in that order."""
    methods = {m: i for i, m in enumerate(dict.fromkeys(metrics["method"]))}
    rows = sorted(metrics[metrics["metric"].isin(HEADLINE)].itertuples(),
                  key=lambda r: (methods[r.method], HEADLINE.index(r.metric)))
    return {f"{r.dataset}/{r.method}/{r.metric}": float(r.value) for r in rows}


def sparkline(values: list[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(bars[int((v - lo) / span * (len(bars) - 1))] for v in values)
