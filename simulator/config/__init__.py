"""Scenario and hardware-profile schema (pydantic v2) and YAML loading."""

from .loading import load_scenario, resolve_dict
from .scenario import ResolvedScenario, Scenario

__all__ = ["ResolvedScenario", "Scenario", "load_scenario", "resolve_dict"]
