"""The α–β–γ cost model of allreduce: coefficients per algorithm, fits from the harness's
sweeps, predictions, the decision table, and the study taken past one machine on paper."""

from .costs import ALGORITHMS, Coefficients, ModelInputError, Params, coefficients, predict_seconds
from .data import load_groups
from .fit import Fit, Host, fit_group
from .table import decision_table, load_fits, save_fits

__all__ = [
    "ALGORITHMS",
    "Coefficients",
    "Fit",
    "Host",
    "ModelInputError",
    "Params",
    "coefficients",
    "decision_table",
    "fit_group",
    "load_fits",
    "load_groups",
    "predict",
    "predict_seconds",
    "save_fits",
]


def predict(fit: Fit, algorithm: str, nodes: int, nbytes: int, host: Host | None = None) -> float:
    """Seconds of one allreduce of ``nbytes`` on ``nodes`` nodes on ``host`` (default: the
    fitted machine), by ``fit``'s parameters."""
    return fit.predict(algorithm, nodes, nbytes, host)
