"""Advantage estimators by verl's name; see ``registry.ESTIMATORS`` for what each needs."""
from .registry import ESTIMATORS, Estimator, get_estimator

__all__ = ["ESTIMATORS", "Estimator", "get_estimator"]
