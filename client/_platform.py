"""The platform's backends, picked at run time: psutil and onnxruntime on a desktop, pyjnius on Android.

Each backend sits behind one interface (``FeatureSource``, ``EnergyMeter``, ``ConditionSource``,
``GradientComputer``, ``LogitsComputer``) so the worker and the app never ask which platform they are on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from fleet_protocol import Manifest

from ._energy import EnergyMeter, EnergyModel, default_energy_meter
from ._features import ConditionSource, FeatureSource, PsutilConditions, PsutilFeatures
from ._onnx_session import GradientComputer, GradientSession, InferenceSession, LogitsComputer

__all__ = ["Backends", "backends", "on_android"]


def on_android() -> bool:
    """True inside a python-for-android app (its bootstrap sets ANDROID_ARGUMENT / ANDROID_PRIVATE)."""
    return "ANDROID_ARGUMENT" in os.environ or "ANDROID_PRIVATE" in os.environ


@dataclass(frozen=True)
class Backends:
    """What a worker and the app need from the platform."""

    name: str
    device_model: str
    features: FeatureSource
    energy: EnergyMeter
    conditions: ConditionSource
    session_factory: Callable[[Manifest, bytes, int], GradientComputer]
    inference_factory: Callable[[bytes], LogitsComputer]


def backends(
    *, android: bool | None = None, bridge: object | None = None, energy_model: EnergyModel | None = None
) -> Backends:
    """This platform's backends; ``android``/``bridge`` force the Android ones (tests pass stand-ins)."""
    if android if android is not None else on_android():
        return _android_backends(bridge, energy_model)
    from ._worker_config import default_device_model

    energy = default_energy_meter(energy_model)
    return Backends(
        name="desktop",
        device_model=default_device_model(),
        features=PsutilFeatures(energy.energy_per_cpu_time),
        energy=energy,
        conditions=PsutilConditions(),
        session_factory=GradientSession,
        inference_factory=InferenceSession,
    )


def _android_backends(bridge: object | None, energy_model: EnergyModel | None) -> Backends:
    from ._android import (
        AndroidBattery,
        AndroidConditions,
        AndroidFeatures,
        JavaBridge,
        Pyjnius,
        android_device_model,
        android_energy_meter,
    )
    from ._android_onnx import AndroidGradientSession, AndroidInferenceSession

    java: JavaBridge = bridge if bridge is not None else Pyjnius()  # type: ignore[assignment]
    battery = AndroidBattery(java)
    energy = android_energy_meter(battery, energy_model)
    return Backends(
        name="android",
        device_model=android_device_model(java),
        features=AndroidFeatures(java, battery=battery, energy_per_cpu_time=energy.energy_per_cpu_time),
        energy=energy,
        conditions=AndroidConditions(java, battery=battery),
        session_factory=partial(AndroidGradientSession, bridge=java),
        inference_factory=partial(AndroidInferenceSession, bridge=java),
    )
