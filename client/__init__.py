"""Fleet's device worker: enroll, take learning tasks, compute gradients on local data with ONNX.

Run-time dependencies: numpy, onnxruntime, httpx, psutil (never torch). The library logs through
``logging.getLogger("fleet.client")`` and never configures logging; the CLI does.
"""

from ._data import DeviceData, FileFedData
from ._energy import BatteryMeter, EnergyMeter, EnergyModel, EnergyReading
from ._exceptions import (
    EnrollmentRefused,
    PrivacyRefused,
    Rejected,
    TaskDeclined,
    TrainingFinished,
    TransportError,
    WorkerError,
)
from ._features import FeatureSource, PsutilFeatures, StaticFeatures
from ._ledger import DeviceLedger, DevicePrivacy
from ._onnx_session import GradientComputer, GradientSession
from ._privacy import (
    DPGradientSession,
    PrivateGradient,
    local_sgd_round,
    norm_laplace_gradient,
    norm_laplace_noise,
    poisson_sample,
    private_gradient,
    private_step,
)
from ._transport import ApiClient, PushResult, TaskGrant
from ._worker import RunSummary, TaskReport, Worker, WorkerConfig, WorkerEvent, run_worker

__all__ = [
    "EnrollmentRefused",
    "ApiClient",
    "BatteryMeter",
    "DPGradientSession",
    "DeviceData",
    "DeviceLedger",
    "DevicePrivacy",
    "EnergyMeter",
    "EnergyModel",
    "EnergyReading",
    "FeatureSource",
    "FileFedData",
    "GradientComputer",
    "GradientSession",
    "PrivacyRefused",
    "PrivateGradient",
    "PsutilFeatures",
    "PushResult",
    "Rejected",
    "RunSummary",
    "StaticFeatures",
    "TaskDeclined",
    "TaskGrant",
    "TaskReport",
    "TrainingFinished",
    "TransportError",
    "Worker",
    "WorkerConfig",
    "WorkerError",
    "WorkerEvent",
    "norm_laplace_gradient",
    "norm_laplace_noise",
    "poisson_sample",
    "private_gradient",
    "private_step",
    "local_sgd_round",
    "run_worker",
]
