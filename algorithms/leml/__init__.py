"""LEML (Yu, Jain, Kar and Dhillon, ICML 2014) and its baselines."""

from algorithms.leml.baselines import BinaryRelevance, ClosedFormLowRank
from algorithms.leml.model import (
    LEML,
    LEMLData,
    objective,
    prepare_data,
    update_H,
    update_W,
    w_gradient,
)

__all__ = [
    "LEML",
    "LEMLData",
    "BinaryRelevance",
    "ClosedFormLowRank",
    "prepare_data",
    "update_W",
    "update_H",
    "w_gradient",
    "objective",
]
