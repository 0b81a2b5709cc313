"""The wire contract between the coordinator and its devices, in one place both sides import.

numpy only (no pydantic, no server code; ``accounting`` adds dp-accounting): ``manifest`` describes a
model's flat parameter buffer and its export bundle; ``wire`` holds the JSON messages of the task
protocol and the tensor encodings.
"""

from fleet_protocol.manifest import BUNDLE_FILES, DP_GRAPH_FILE, Bundle, Manifest, ParamSpec, read_zip
from fleet_protocol.wire import (
    GAUSSIAN_MECHANISM,
    LOCAL_SGD_MECHANISM,
    META_HEADER,
    NOISE_SAMPLERS,
    NORM_LAPLACE_MECHANISM,
    WIRE_DTYPES,
    DPTerms,
    Encoding,
    PushMeta,
    PushOutcome,
    Rejection,
    TaskAsk,
    TaskDecline,
    TaskGrant,
    WireError,
    decode_tensor,
    encode_multipart,
    encode_push,
    push_digest,
)

__all__ = [
    "BUNDLE_FILES",
    "DP_GRAPH_FILE",
    "GAUSSIAN_MECHANISM",
    "META_HEADER",
    "NOISE_SAMPLERS",
    "NORM_LAPLACE_MECHANISM",
    "LOCAL_SGD_MECHANISM",
    "WIRE_DTYPES",
    "Bundle",
    "DPTerms",
    "Encoding",
    "Manifest",
    "ParamSpec",
    "PushMeta",
    "PushOutcome",
    "Rejection",
    "TaskAsk",
    "TaskDecline",
    "TaskGrant",
    "WireError",
    "decode_tensor",
    "encode_multipart",
    "encode_push",
    "push_digest",
    "read_zip",
]
