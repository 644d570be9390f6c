"""Probes: the base class, function probes, registries and the data types they exchange."""

from ..spec.activation_record import ActivationRecord
from .context import RequestContext
from .function_probe import FunctionProbe, probe
from .probe import Probe, ProbeFactory
from .registry import (
    ENTRY_POINT_GROUP,
    ProbeNotFoundError,
    ProbeRegistry,
    default_registry,
    get_probe_factory,
    list_probes,
    register_probe,
    unregister_probe,
)
from .result import ProbeResult
from .signal import ProbeAction, ProbeSignal

__all__ = [
    "ENTRY_POINT_GROUP",
    "ActivationRecord",
    "FunctionProbe",
    "Probe",
    "ProbeAction",
    "ProbeFactory",
    "ProbeNotFoundError",
    "ProbeRegistry",
    "ProbeResult",
    "ProbeSignal",
    "RequestContext",
    "default_registry",
    "get_probe_factory",
    "list_probes",
    "probe",
    "register_probe",
    "unregister_probe",
]
