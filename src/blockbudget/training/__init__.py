"""DP training pipelines and Sage's quality control (seed 004 §3.1, §3.3, §5, Appendix B).

* :mod:`~blockbudget.training.pipeline` — the (ε, δ)-DP pipeline (preprocess / train /
  validate, List. 1) and its budget split; :mod:`~blockbudget.training.pipelines` — ready ones
  (AdaSSP, DP-SGD, group means), given an application's public per-row maps.
* :mod:`~blockbudget.training.adassp`, :mod:`~blockbudget.training.dpsgd` — DP models with a
  scikit-learn-style ``fit``/``predict`` (AdaSSP; DP-SGD through Opacus, imported lazily);
  :mod:`~blockbudget.training.sizing` — the public or DP-counted size DP-SGD plans with.
* :mod:`~blockbudget.training.validation`, :mod:`~blockbudget.training.validators`,
  :mod:`~blockbudget.training.bounds` — SLAed validators (loss, accuracy, sum statistics) and
  their concentration bounds.
* :mod:`~blockbudget.training.adaptive` — privacy-adaptive training on a platform stream.
* :mod:`~blockbudget.training.executors` — in-process and Ray executors.
* :mod:`~blockbudget.training.sources` — an in-memory budget source for simulations.

See docs/training.md.
"""

from blockbudget.outcome import Outcome
from blockbudget.training.adaptive import (
    AdaptiveConfig,
    AdaptiveSearch,
    AdaptiveTrainer,
    Attempt,
    Status,
)
from blockbudget.training.adassp import AdaSSPRegressor
from blockbudget.training.dpsgd import DPSGDModel, Task
from blockbudget.training.executors import (
    Executor,
    InProcessExecutor,
    PipelineJob,
    RayExecutor,
)
from blockbudget.training.linear_dpsgd import LogisticDPSGD
from blockbudget.training.pipeline import BudgetSplit, Pipeline, PipelineRun, Prepared
from blockbudget.training.pipelines import (
    AdaSSPPipeline,
    DPSGDPipeline,
    FeaturePipeline,
    GroupMeanPipeline,
)
from blockbudget.training.sources import MeteredSource
from blockbudget.training.validation import (
    Inequality,
    SlaMode,
    ValidationResult,
    Validator,
)
from blockbudget.training.validators import (
    AccuracyEvidence,
    AccuracyValidator,
    LossEvidence,
    LossValidator,
    SumStatisticEvidence,
    SumStatisticValidator,
)

__all__ = [
    "AccuracyEvidence",
    "AccuracyValidator",
    "AdaSSPPipeline",
    "AdaSSPRegressor",
    "AdaptiveConfig",
    "AdaptiveSearch",
    "AdaptiveTrainer",
    "Attempt",
    "BudgetSplit",
    "DPSGDModel",
    "DPSGDPipeline",
    "Executor",
    "FeaturePipeline",
    "GroupMeanPipeline",
    "InProcessExecutor",
    "Inequality",
    "LogisticDPSGD",
    "LossEvidence",
    "LossValidator",
    "MeteredSource",
    "Outcome",
    "Pipeline",
    "PipelineJob",
    "PipelineRun",
    "Prepared",
    "RayExecutor",
    "SlaMode",
    "Status",
    "SumStatisticEvidence",
    "SumStatisticValidator",
    "Task",
    "ValidationResult",
    "Validator",
]
