"""I-Prof: per-device-model prediction of the largest mini-batch within a time and an energy SLO."""

from profiler.features import ENERGY_FEATURES, FEATURES
from profiler.iprof import BatchDecision, IProf
from profiler.slope import SlopeRegressor

__all__ = ["ENERGY_FEATURES", "FEATURES", "BatchDecision", "IProf", "SlopeRegressor"]
