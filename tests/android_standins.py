"""Stand-ins for the Android Java classes the app calls through pyjnius (the only fakes the app's tests use).

``StandInBridge`` answers ``autoclass(name)`` with classes named, shaped and valued like Android's:
the framework classes replay recorded readings (tests/fixtures/android_phone.json), and the
``ai.onnxruntime`` classes run the graph with the onnxruntime Python package, so the byte-buffer
marshalling of client/_android_onnx.py is exercised for real. Method names are Java's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

FIXTURE = Path(__file__).parent / "fixtures" / "android_phone.json"


def recorded(name: str = "pixel_6") -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())["devices"][name]


class JavaException(Exception):
    """What pyjnius raises when Java throws."""


class _Context:
    ACTIVITY_SERVICE = "activity"
    BATTERY_SERVICE = "batterymanager"
    CONNECTIVITY_SERVICE = "connectivity"


class _BatteryManagerClass:
    BATTERY_PROPERTY_CHARGE_COUNTER = 1
    BATTERY_PROPERTY_CURRENT_NOW = 2
    BATTERY_PROPERTY_CAPACITY = 4
    BATTERY_PROPERTY_ENERGY_COUNTER = 5
    EXTRA_TEMPERATURE = "temperature"
    EXTRA_PLUGGED = "plugged"
    EXTRA_LEVEL = "level"
    EXTRA_SCALE = "scale"


class _Intent:
    ACTION_BATTERY_CHANGED = "android.intent.action.BATTERY_CHANGED"

    def __init__(self, extras: dict[str, int]) -> None:
        self.extras = extras

    def getIntExtra(self, name: str, default: int) -> int:  # noqa: N802 - Java's name
        return int(self.extras.get(name, default))


class _IntentFilter:
    def __init__(self, action: str) -> None:
        self.action = action


class _MemoryInfo:
    def __init__(self) -> None:
        self.availMem = 0
        self.totalMem = 0


class StandInBridge:
    """``JavaBridge`` over recorded values; ``reading`` picks the battery reading now on the phone."""

    def __init__(self, device: dict[str, Any] | None = None, *, ort_error: str | None = None) -> None:
        self.device = device if device is not None else recorded()
        self.reading = 0
        self.ort_error = ort_error
        self.open_tensors: set[int] = set()
        self.broken: set[str] = set()  # Java calls that throw, e.g. {"getMemoryInfo"}

    def battery(self) -> dict[str, Any]:
        readings = self.device["battery"]
        return readings[min(self.reading, len(readings) - 1)]

    def context(self) -> Any:
        return _ContextObject(self)

    def autoclass(self, name: str) -> Any:
        classes: dict[str, Any] = {
            "android.content.Context": _Context,
            "android.os.BatteryManager": _BatteryManagerClass,
            "android.content.Intent": _Intent,
            "android.content.IntentFilter": _IntentFilter,
            "android.app.ActivityManager$MemoryInfo": _MemoryInfo,
            "android.os.Build": type("Build", (), dict(self.device["build"])),
            "java.util.HashMap": _HashMap,
            "java.util.HashSet": _HashSet,
            "java.nio.ByteBuffer": _ByteBuffer,
            "java.nio.ByteOrder": _ByteOrder,
            "ai.onnxruntime.OrtEnvironment": _OrtEnvironmentClass(self),
            "ai.onnxruntime.OrtSession$SessionOptions": _SessionOptions,
            "ai.onnxruntime.OnnxTensor": _OnnxTensorClass(self),
        }
        if name not in classes:
            raise JavaException(f"java.lang.ClassNotFoundException: {name}")
        return classes[name]


class _ContextObject:
    def __init__(self, bridge: StandInBridge) -> None:
        self.bridge = bridge

    def getSystemService(self, name: str) -> Any:  # noqa: N802
        return {"activity": _ActivityManager, "batterymanager": _BatteryManager,
                "connectivity": _ConnectivityManager}[name](self.bridge)  # fmt: skip

    def registerReceiver(self, receiver: Any, intent_filter: _IntentFilter) -> _Intent:  # noqa: N802
        assert receiver is None and intent_filter.action == _Intent.ACTION_BATTERY_CHANGED
        return _Intent(self.bridge.battery()["extras"])


class _ActivityManager:
    def __init__(self, bridge: StandInBridge) -> None:
        self.bridge = bridge

    def getMemoryInfo(self, info: _MemoryInfo) -> None:  # noqa: N802
        if "getMemoryInfo" in self.bridge.broken:
            raise JavaException("java.lang.SecurityException: recorded failure")
        info.availMem = self.bridge.device["memory_info"]["availMem"]
        info.totalMem = self.bridge.device["memory_info"]["totalMem"]


class _BatteryManager:
    def __init__(self, bridge: StandInBridge) -> None:
        self.bridge = bridge

    def getIntProperty(self, prop: int) -> int:  # noqa: N802
        key = {1: "charge_counter_uah", 2: "current_now_ua", 4: "capacity"}[prop]
        return int(self.bridge.battery()[key])

    def getLongProperty(self, prop: int) -> int:  # noqa: N802
        assert prop == 5
        return int(self.bridge.battery()["energy_counter_nwh"])

    def isCharging(self) -> bool:  # noqa: N802
        return bool(self.bridge.battery()["is_charging"])


class _ConnectivityManager:
    def __init__(self, bridge: StandInBridge) -> None:
        self.network = bridge.device["connectivity"]

    def getActiveNetwork(self) -> object | None:  # noqa: N802
        return object() if self.network["active_network"] else None

    def isActiveNetworkMetered(self) -> bool:  # noqa: N802
        return bool(self.network["metered"])


# --- java.util and java.nio ----------------------------------------------------------------------


class _HashMap(dict):
    def put(self, key: str, value: Any) -> None:
        self[key] = value


class _HashSet(list):
    def add(self, value: str) -> None:
        self.append(value)

    def toArray(self) -> list[str]:  # noqa: N802
        return list(self)


class _ByteOrder:
    @staticmethod
    def nativeOrder() -> str:  # noqa: N802
        return "LITTLE_ENDIAN"


class _ByteBuffer:
    """A direct buffer that pyjnius filled from Python ``bytes`` (a ``byte[]``), or a heap copy."""

    def __init__(self, size: int, direct: bool) -> None:
        self.data, self.direct, self.position, self.ordered = bytearray(size), direct, 0, False

    @classmethod
    def allocateDirect(cls, size: int) -> _ByteBuffer:  # noqa: N802
        return cls(size, True)

    def order(self, order: str) -> _ByteBuffer:
        self.ordered = order == "LITTLE_ENDIAN"
        return self

    def put(self, data: bytes) -> _ByteBuffer:
        assert isinstance(data, bytes), "pyjnius converts bytes to byte[]"
        self.data[self.position : self.position + len(data)] = data
        self.position += len(data)
        return self

    def rewind(self) -> _ByteBuffer:
        self.position = 0
        return self

    def asFloatBuffer(self) -> tuple[_ByteBuffer, type]:  # noqa: N802
        assert self.ordered, "a buffer must be in native order before it is viewed as floats"
        return (self, np.float32)

    def asLongBuffer(self) -> tuple[_ByteBuffer, type]:  # noqa: N802
        assert self.ordered
        return (self, np.int64)

    def hasArray(self) -> bool:  # noqa: N802
        return not self.direct

    def array(self) -> list[int]:
        return np.frombuffer(bytes(self.data), dtype=np.int8).tolist()  # byte[] as pyjnius may return it


# --- ai.onnxruntime over the onnxruntime Python package ----------------------------------------------


class _SessionOptions:
    def __init__(self) -> None:
        self.threads = 0

    def setIntraOpNumThreads(self, threads: int) -> None:  # noqa: N802
        self.threads = threads


class _OrtEnvironmentClass:
    def __init__(self, bridge: StandInBridge) -> None:
        self.bridge = bridge

    def getEnvironment(self) -> _OrtEnvironmentClass:  # noqa: N802
        return self

    def createSession(self, model: bytes, options: _SessionOptions) -> _OrtSession:  # noqa: N802
        assert isinstance(model, bytes) and options.threads >= 1
        if self.bridge.ort_error:
            raise JavaException(f"ai.onnxruntime.OrtException: {self.bridge.ort_error}")
        return _OrtSession(self.bridge, model)


class _OrtSession:
    def __init__(self, bridge: StandInBridge, model: bytes) -> None:
        import onnxruntime as ort

        self.bridge = bridge
        self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    def getInputNames(self) -> _HashSet:  # noqa: N802
        return _HashSet(i.name for i in self.session.get_inputs())

    def getOutputNames(self) -> _HashSet:  # noqa: N802
        return _HashSet(o.name for o in self.session.get_outputs())

    def run(self, inputs: _HashMap, requested: _HashSet) -> _Result:
        feeds = {name: tensor.array for name, tensor in inputs.items()}
        values = self.session.run(list(requested), feeds)
        return _Result(
            {n: _OnnxTensor(self.bridge, np.asarray(v)) for n, v in zip(requested, values, strict=True)}
        )


class _Optional:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self) -> Any:
        return self.value


class _Result:
    def __init__(self, tensors: dict[str, _OnnxTensor]) -> None:
        self.tensors = tensors

    def get(self, name: str) -> _Optional:
        return _Optional(self.tensors[name])

    def close(self) -> None:
        for tensor in self.tensors.values():
            tensor.close()


class _TensorInfo:
    def __init__(self, array: np.ndarray) -> None:
        self.shape = list(array.shape)
        name = {"float32": "FLOAT", "int64": "INT64"}[str(array.dtype)]
        self.type = type("OnnxJavaType", (), {"name": staticmethod(lambda: name)})()

    def getShape(self) -> list[int]:  # noqa: N802
        return self.shape


class _OnnxTensor:
    def __init__(self, bridge: StandInBridge, array: np.ndarray) -> None:
        self.bridge, self.array = bridge, array
        bridge.open_tensors.add(id(self))

    def getInfo(self) -> _TensorInfo:  # noqa: N802
        return _TensorInfo(self.array)

    def getByteBuffer(self) -> _ByteBuffer:  # noqa: N802
        copy = _ByteBuffer(self.array.nbytes, direct=False).order("LITTLE_ENDIAN")
        return copy.put(self.array.tobytes()).rewind()

    def close(self) -> None:
        self.bridge.open_tensors.discard(id(self))


class _OnnxTensorClass:
    def __init__(self, bridge: StandInBridge) -> None:
        self.bridge = bridge

    def createTensor(self, env: Any, typed: tuple[_ByteBuffer, type], shape: list[int]) -> _OnnxTensor:  # noqa: N802
        buffer, dtype = typed
        assert all(isinstance(d, int) for d in shape)
        array = np.frombuffer(bytes(buffer.data), dtype=dtype).reshape(shape)
        return _OnnxTensor(self.bridge, array)
