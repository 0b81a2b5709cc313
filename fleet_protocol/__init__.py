"""The wire contract between the coordinator and its devices, in one place both sides import.

numpy only (no pydantic, no server code): ``manifest`` describes a model's flat parameter buffer and
its export bundle; ``wire`` holds the JSON messages of the task protocol and the tensor encodings.
"""

from fleet_protocol.manifest import BUNDLE_FILES, Bundle, Manifest, ParamSpec, read_zip
from fleet_protocol.wire import (
    META_HEADER,
    WIRE_DTYPES,
    Encoding,
    PushMeta,
    PushOutcome,
    Rejection,
    TaskAsk,
    TaskGrant,
    WireError,
    decode_tensor,
    encode_multipart,
    encode_push,
    push_digest,
)

__all__ = [
    "BUNDLE_FILES",
    "META_HEADER",
    "WIRE_DTYPES",
    "Bundle",
    "Encoding",
    "Manifest",
    "ParamSpec",
    "PushMeta",
    "PushOutcome",
    "Rejection",
    "TaskAsk",
    "TaskGrant",
    "WireError",
    "decode_tensor",
    "encode_multipart",
    "encode_push",
    "push_digest",
    "read_zip",
]
