"""The device's HTTP calls (docs/protocol.md), mapped to plain objects and the worker's exceptions."""

from __future__ import annotations

import email.utils
import logging
import ssl
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import httpx
import numpy as np

from fleet_protocol import (
    META_HEADER,
    Manifest,
    PushOutcome,
    TaskAsk,
    TaskDecline,
    TaskGrant,
    WireError,
    decode_tensor,
    encode_multipart,
    encode_push,
)

from ._exceptions import EnrollmentRefused, Rejected, TrainingFinished, TransportError, WorkerError

__all__ = [
    "DEFAULT_TIMEOUT",
    "META_HEADER",
    "ApiClient",
    "Enrollment",
    "PushResult",
    "TaskGrant",
    "encode_multipart",
    "encode_push",
]

logger = logging.getLogger("fleet.client")

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
DEFAULT_RETRY_AFTER = 5.0
USER_AGENT = "fleet-worker/0.1"


@dataclass(frozen=True)
class Enrollment:
    """The device's identity after ``POST /v1/devices``."""

    device_id: str
    token: str


PushResult = PushOutcome  # the client's historical name for a push's answer


class ApiClient:
    """Speaks the device side of the REST protocol over one ``httpx.Client``.

    Pass ``client`` (any configured ``httpx.Client``; not closed here) or ``base_url`` plus
    optionally ``transport`` (e.g. ``httpx.MockTransport`` or ``httpx.ASGITransport``), ``timeout``,
    ``verify`` (bool, CA bundle path or ``ssl.SSLContext``) and ``cert`` (client certificate path).
    Parameters are cached per (model_id, version) and manifests/graphs per model_id, in memory.
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        verify: bool | str | ssl.SSLContext = True,
        cert: str | None = None,
        token: str | None = None,
        params_cache_size: int = 4,
        model_cache_size: int = 2,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("pass base_url or client")
            client = httpx.Client(
                base_url=base_url,
                transport=transport,
                timeout=timeout,
                verify=_ssl_context(verify, cert),
                headers={"User-Agent": USER_AGENT},
            )
            self._owns_client = True
        else:
            self._owns_client = False
        self.client = client
        self.token = token
        self._params: _LRU[tuple[str, int], tuple[str | None, np.ndarray]] = _LRU(params_cache_size)
        self._models: _LRU[str, tuple[Manifest, bytes]] = _LRU(model_cache_size)
        self._dp_graphs: _LRU[str, bytes] = _LRU(model_cache_size)

    def __repr__(self) -> str:
        return f"ApiClient(base_url={str(self.client.base_url)!r}, enrolled={self.token is not None})"

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP client if this object built it."""
        if self._owns_client:
            self.client.close()

    # --- devices and tasks -------------------------------------------------------------------

    def enroll(self, enrollment_key: str, device_model: str, install_secret: str | None = None) -> Enrollment:
        """Register this device; later calls carry the returned bearer token. With ``install_secret`` (the
        install's own, client/_state.py), enrolling again returns the same device id."""
        body = {"enrollment_key": enrollment_key, "device_model": device_model}
        if install_secret is not None:
            body["install_secret"] = install_secret
        response = self._request("POST", "/v1/devices", json=body)
        data = _json(response)
        try:
            enrollment = Enrollment(device_id=str(data["device_id"]), token=str(data["token"]))
        except (KeyError, TypeError) as exc:
            raise WorkerError(f"malformed enrollment answer: {exc!r}") from exc
        self.token = enrollment.token
        return enrollment

    def active_model(self) -> dict[str, Any]:
        """``ModelInfo`` of the model that trains now (404 → ``Rejected("no_model")``)."""
        try:
            return _json(self._request("GET", "/v1/models/active"))
        except WorkerError as exc:
            if exc.status_code == 404:
                raise Rejected(exc.detail, reason="no_model", retry_after=DEFAULT_RETRY_AFTER) from exc
            raise

    def request_task(
        self,
        *,
        device_model: str,
        features: dict[str, float | None],
        label_counts: list[int] | None,
        local_examples: int | None = None,
    ) -> TaskGrant:
        """Ask for a learning task; raises ``Rejected``/``TrainingFinished`` when there is none. Label counts
        of None (a DP device's) are left out of the JSON."""
        ask = TaskAsk(
            label_counts=label_counts,
            features=features,
            device_model=device_model,
            local_examples=local_examples,
        )
        body = {k: v for k, v in asdict(ask).items() if not (k == "label_counts" and v is None)}
        data = _json(self._request("POST", "/v1/tasks", json=body))
        try:
            return TaskGrant.from_json(data)
        except WireError as exc:
            raise WorkerError(str(exc)) from exc

    def push_result(self, task_id: str, meta: dict[str, Any], gradient: np.ndarray) -> PushResult:
        """Send one task's gradient (raw body, meta in a header); safe to retry with the same body."""
        return self.push_encoded(task_id, *encode_push(meta, gradient))

    def push_encoded(self, task_id: str, headers: dict[str, str], body: bytes) -> PushResult:
        """Send an already encoded result, so retries send byte-identical requests."""
        response = self._request("POST", f"/v1/tasks/{task_id}/result", content=body, headers=headers)
        try:
            return PushOutcome.from_json(_json(response), task_id=task_id)
        except WireError as exc:
            raise WorkerError(str(exc)) from exc

    def decline(self, task_id: str, reason: str, detail: str) -> None:
        """Give a granted task back unrun (``TaskDecline``): the coordinator ends the lease, records why."""
        body = asdict(TaskDecline(reason=reason, detail=detail.replace("\x00", "")[:500]))
        self._request("POST", f"/v1/tasks/{task_id}/decline", json=body)

    # --- models --------------------------------------------------------------------------------

    def model(
        self, model_id: str, *, manifest_url: str | None = None, train_graph_url: str | None = None
    ) -> tuple[Manifest, bytes]:
        """The manifest and ``train.onnx`` bytes of a model (cached per model_id)."""
        cached = self._models.get(model_id)
        if cached is not None:
            return cached
        text = self._request("GET", manifest_url or f"/v1/models/{model_id}/manifest").content
        try:
            manifest = Manifest.from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise WorkerError(f"malformed manifest of model {model_id}: {exc}") from exc
        graph = self._request("GET", train_graph_url or f"/v1/models/{model_id}/graphs/train.onnx").content
        self._models.put(model_id, (manifest, graph))
        return manifest, graph

    def dp_graph(self, model_id: str, url: str | None = None) -> bytes:
        """``dp_train.onnx``, the per-example-clipped gradient graph a DP task runs (cached per model)."""
        cached = self._dp_graphs.get(model_id)
        if cached is None:
            cached = self._request("GET", url or f"/v1/models/{model_id}/graphs/dp.onnx").content
            self._dp_graphs.put(model_id, cached)
        return cached

    def inference_model(self, model_id: str, version: int | None = None) -> bytes:
        """``inference.onnx`` of a version (default: the newest) with its weights inside."""
        params = {"version": version} if version is not None else None
        return self._request("GET", f"/v1/models/{model_id}/inference.onnx", params=params).content

    def params(
        self,
        model_id: str,
        version: int,
        *,
        url: str | None = None,
        num_params: int | None = None,
        revalidate: bool = False,
        encoding: str = "float32",
    ) -> np.ndarray:
        """A version's flat float32 parameters (read-only array); ``encoding="float16"`` halves the bytes.

        Versions are immutable, so a cached version is served without a request; ``revalidate``
        asks anyway with ``If-None-Match`` (a ``304`` keeps the cached copy).
        """
        key = (model_id, version)
        cached = self._params.get(key)
        if cached is not None and not revalidate:
            return cached[1]
        headers = {"If-None-Match": cached[0]} if cached is not None and cached[0] else {}
        url = url or f"/v1/models/{model_id}/versions/{version}/params"
        params = {"encoding": encoding} if encoding != "float32" else None
        response = self._request("GET", url, headers=headers, params=params, ok=(200, 304))
        if response.status_code == 304 and cached is not None:
            return cached[1]
        if response.status_code == 304:
            raise WorkerError("304 for parameters that are not cached", status_code=304)
        try:
            flat = decode_tensor(response.content, encoding)
        except WireError as exc:
            raise WorkerError(f"parameter body: {exc}") from exc
        if num_params is not None and flat.size != num_params:
            raise WorkerError(f"version {version} has {flat.size} parameters, manifest says {num_params}")
        flat.flags.writeable = False
        self._params.put(key, (response.headers.get("ETag"), flat))
        return flat

    # --- plumbing ------------------------------------------------------------------------------

    def _request(self, method: str, url: str, *, ok: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            response = self.client.request(method, url, headers=headers, **kwargs)
        except httpx.TimeoutException as exc:
            raise TransportError(f"{method} {url}: timed out ({exc!r})") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"{method} {url}: {exc!r}") from exc
        logger.debug("%s %s -> %d", method, url, response.status_code)
        if response.is_success or response.status_code in ok:
            return response
        raise _error_from(response)


# reasons of POST /v1/devices that no retry changes (server/api/routes/devices.py): 403s, and the 401 of a
# join code past its end
ENROLLMENT_REFUSALS = {
    "enrollment_quota": 403,
    "attestation_refused": 403,
    "install_revoked": 403,
    "enrollment_code_expired": 401,
}


def _error_from(response: httpx.Response) -> WorkerError:
    """Map a non-2xx answer to the exception tree (see ``_exceptions``)."""
    status = response.status_code
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        data = {}
    detail = str(data.get("detail") or response.reason_phrase or f"HTTP {status}")
    reason = data.get("reason")
    retry_after = _retry_after(data.get("retry_after"), response.headers.get("Retry-After"))
    where = f"{response.request.method} {response.request.url.path}"
    if reason == "training_finished":
        return TrainingFinished(detail, reason=reason, retry_after=retry_after, status_code=status)
    if isinstance(reason, str) and ENROLLMENT_REFUSALS.get(reason) == status:
        message = f"enrollment refused ({reason}): {detail}"
        return EnrollmentRefused(message, reason=reason, status_code=status)
    if status == 503 and isinstance(reason, str):
        return Rejected(detail, reason=reason, retry_after=retry_after, status_code=status)
    if status == 429:
        return Rejected(detail, reason=reason or "rate_limited", retry_after=retry_after, status_code=status)
    if status >= 500 or status == 408:  # 408: the body was too slow (a poor link), worth sending again
        return TransportError(f"{where}: {status} {detail}", status_code=status)
    return WorkerError(f"{where}: {status} {detail}", status_code=status)


def _retry_after(body_value: Any, header: str | None) -> float:
    """Seconds to wait: the body's ``retry_after``, else the header (seconds or HTTP date), else 5 s."""
    for value in (body_value, header):
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except (TypeError, ValueError):
            pass
        try:
            when = email.utils.parsedate_to_datetime(str(value))
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - time.time())
    return DEFAULT_RETRY_AFTER


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as exc:
        raise WorkerError(
            f"expected JSON from {response.request.url.path}", status_code=response.status_code
        ) from exc


def _ssl_context(verify: bool | str | ssl.SSLContext, cert: str | None) -> bool | ssl.SSLContext:
    """httpx's ``verify`` value: a CA bundle path and a client certificate become an SSLContext."""
    if isinstance(verify, ssl.SSLContext):
        if cert:
            verify.load_cert_chain(cert)
        return verify
    if isinstance(verify, str | Path):
        context = ssl.create_default_context(cafile=str(verify))
    elif cert:
        context = ssl.create_default_context()
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
    else:
        return bool(verify)
    if cert:
        context.load_cert_chain(cert)
    return context


K = TypeVar("K")
V = TypeVar("V")


class _LRU(Generic[K, V]):
    """A small least-recently-used map owned by one ``ApiClient``."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._items: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        if key not in self._items:
            return None
        self._items.move_to_end(key)
        return self._items[key]

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
