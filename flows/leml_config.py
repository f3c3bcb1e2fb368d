"""The LEML flow's config schema (``configs/leml.yaml``) and the checks of a run before it starts.

Apart from the flow (:mod:`scarce.flows.leml`), and importing neither Prefect, scikit-learn nor
Dask,
so that a command validates a config and checks its input files (their heads, a table's
columns and label cells) in a fraction of the flow's import time, before it starts a server.
The model's options, defaults and bounds are the estimator's, declared once in
:mod:`scarce.algorithms.leml.params`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, field_validator, model_validator

from scarce.algorithms.leml.factors import check_factor_memory
from scarce.algorithms.leml.params import (
    AUTO,
    AUTO_SQUARED_INIT_ITER,
    BASELINE_ALPHA,
    BASELINES,
    BATCH_SIZE,
    DTYPES,
    H_SOLVERS,
    LOSS_NAMES,
    N_BLOCKS,
    PARAMS,
    PRECONDITIONERS,
    VECTORIZERS,
    W_SOLVERS,
    check_params,
)
from scarce.flows.config import (
    DATASET_NAME,
    NAME_LENGTH,
    FlowConfig,
    Strict,
    from_declared,
    input_path,
    resolve_path,
)
from scarce.tasks.leml_inputs import check_inputs, input_parts
from scarce.tasks.leml_table import check_table_columns, check_table_labels, read_label_list

if TYPE_CHECKING:
    from scarce.algorithms.leml import LEML
    from scarce.flows.runtime import RunContext

#: The estimator whose parameters the ``model`` section holds.
ESTIMATOR = "scarce.algorithms.leml.model.LEML"


def from_params(name: str, bounds: bool = True, **field) -> object:
    """A ``model`` field: the default and (with ``bounds``) the bounds of the estimator's
    parameter ``name`` (:data:`scarce.algorithms.leml.params.PARAMS`)."""
    param = PARAMS[name]
    return from_declared(ESTIMATOR, name, param.default,
                         **(param.bounds() if bounds else {}), **field)


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
    """The parameters of :class:`scarce.algorithms.leml.LEML` (its defaults, its checks)."""

    loss: Literal[LOSS_NAMES] = from_params(
        "loss", description="Loss: squared (0/1 targets), logistic or squared hinge (+-1 "
        "margins).")
    rank: int = from_params("rank", description="k, the rank of Z = W H^T.")
    lam: float = from_params("lam", description="Regularisation lambda.")
    outer_iterations: int = from_params(
        "outer_iterations",
        description="Alternating iterations T: the most that run when tol stops earlier.")
    tol: float = from_params(
        "tol", description="Stop once an outer iteration lowers the objective by less than "
        "this, relative to the objective before it (the run's log says where and why); 0 runs "
        "all outer_iterations.")
    early_stopping: bool = from_params(
        "early_stopping",
        description="Choose the number of outer iterations on training rows held out "
        "(validation_fraction): iterate on the others while the held-out rows' P@1 rises "
        "(n_iter_no_change), then train on every row for the best number; the log says "
        "where it stopped and why.")
    validation_fraction: float = from_params(
        "validation_fraction", description="early_stopping: the share of the training rows "
        "held out (seeded by the run's seed).")
    n_iter_no_change: int = from_params(
        "n_iter_no_change", description="early_stopping: iterations without a higher "
        "held-out P@1 before the held-out pass ends.")
    cg_max_iter: int = from_params(
        "cg_max_iter", description="CG iterations per W-step / Newton step.")
    cg_tol: float = from_params(
        "cg_tol", description="CG relative residual tolerance (0: every cg_max_iter "
        "iteration).")
    cg_preconditioner: Literal[PRECONDITIONERS] = from_params(
        "cg_preconditioner",
        description="Squared loss (missing labels too): plain CG in the W-step (the "
        "paper's), or CG preconditioned by the Hessian with X^T X kept to its diagonal (each "
        "row weighted by its share of observed labels); logistic / sq. hinge: with diagonal "
        "the auto solvers are the bound steps from a squared-loss start.")
    newton_max_iter: int = from_params(
        "newton_max_iter", description="Newton steps (logistic, sq. hinge).")
    fit_intercept: bool = from_params("fit_intercept", description="Add a constant feature.")
    h_solver: Literal[(AUTO, *H_SOLVERS)] = from_params(
        "h_solver",
        description="H-step Newton directions for logistic / sq. hinge: explicit per-label "
        "k x k Hessians or per-label conjugate gradient (cg_max_iter, cg_tol); or bound: "
        "newton_max_iter steps on the quadratic curvature bound; auto: bound with "
        "cg_preconditioner diagonal, else direct.")
    w_solver: Literal[(AUTO, *W_SOLVERS)] = from_params(
        "w_solver",
        description="W-step for logistic / sq. hinge: TRON, or newton_max_iter steps on the "
        "quadratic curvature bound solved through the eigendecomposition of X^T X; auto: "
        "bound with cg_preconditioner diagonal (tron on row blocks), else tron.")
    squared_init_iter: (Annotated[int, Field(**PARAMS["squared_init_iter"].bounds())]
                        | Literal[AUTO]) = from_params(
        "squared_init_iter", bounds=False,  # (on the int of the union, above)
        description="Logistic / sq. hinge: start from this many squared-loss iterations "
        "mapped to +-1 margins (needs fit_intercept; 0 = random start; auto: "
        f"{AUTO_SQUARED_INIT_ITER} with cg_preconditioner diagonal, fit_intercept and "
        "rank >= 2, else 0).")
    dtype: Literal[DTYPES] = from_params("dtype", description="Floating type.")

    def estimator(self, **params) -> LEML:
        """``LEML`` with these parameters (and ``params``, such as ``random_state``)."""
        from scarce.algorithms.leml import LEML

        return LEML(**self.model_dump(), **params)

    def check_memory(self, n_samples: int, n_features: int, n_labels: int, *,
                     fully_observed: bool = True, what: str = "") -> ModelConfig:
        """:meth:`scarce.algorithms.leml.LEML.check_memory` of these parameters, without the
        estimator (for the checks before a run: :func:`check_data`)."""
        check_factor_memory(n_samples, int(n_features) + int(self.fit_intercept), n_labels,
                            self.rank, self.dtype, fully_observed, what)
        return self

    @model_validator(mode="after")
    def _the_estimator_accepts_them(self) -> ModelConfig:
        check_params(self.model_dump())
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
    """

    backend: Literal[tuple(BACKENDS)] = Field(
        "local",
        description="Where the steps over the training rows run (the W-step's products, the "
        "H-step's sums, the objective; with dask also loading, evaluation and predictions): "
        "this process on the whole data (local), the row blocks' tasks in this process "
        "without Dask (local-blocks: the same bits as dask), or Dask workers each holding its "
        "row blocks (dask).",
    )
    row_blocks: int = from_declared(
        "scarce.tasks.leml_dask.RowBlockBackend", "blocks", N_BLOCKS, ge=1, le=256,
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
    baseline_alpha: float = from_declared(
        "scarce.algorithms.leml.baselines.BinaryRelevance", "alpha", BASELINE_ALPHA, gt=0,
        description="Ridge / inverse-C strength of the baselines."
    )
    compute: ComputeConfig = Field(
        default_factory=ComputeConfig,
        description="Where the run computes: this process, or row blocks here or on Dask "
        "workers.",
    )
    batch_size: int = Field(
        BATCH_SIZE, ge=1, description="Rows scored at a time in evaluation."
    )

    @model_validator(mode="after")
    def _model_can_run_on_row_blocks(self) -> LemlConfig:
        if self.compute.blocked:
            check_params(self.model.model_dump(), distributed=True)
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


def check_data(config: LemlConfig) -> dict[str, list[Path]]:
    """What the input files tell before any is read in full, checked before the flow's first
    step and before a command starts its server (:meth:`LemlConfig.check_before_run`): the
    parts of a folder; the heads' numbers of features and labels agree, the training rows
    are enough and the factors fit (:func:`scarce.tasks.leml_inputs.check_inputs`); of a table, its
    columns
    and the label cells of the training table's head (its space is learned from the
    training table: :func:`scarce.tasks.leml_table.check_table_labels`).  Returns the files of
    ``train`` and ``test`` (a file, or the parts of a folder)."""
    d = config.dataset
    files = {which: _input_files(d, which) for which in ("train", "test")}
    on_test = d.evaluate_on == "test"
    if d.format != "table":
        # the factors' memory from the config's parameters: the estimator is not imported
        check_inputs(config.model, files, d.format, d.n_labels,
                     fully_observed=config.observed_fraction == 1,
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
    of a folder of parts (:func:`scarce.tasks.leml_inputs.input_parts`)."""
    path = resolve_path(getattr(d, which))
    return input_parts(path, d.format, key=f"dataset.{which}") or [path]
