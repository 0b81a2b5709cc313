"""Property tests of the wire decoders: any input is decoded exactly or refused with a 4xx, never a 5xx."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fleet_protocol import WireError, decode_tensor, encode_multipart, encode_push

FLOATS32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=300)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # beyond float16's range: ±inf both ways
@given(arrays(np.float32, st.integers(0, 64), elements=FLOATS32), st.sampled_from(["float32", "float16"]))
@settings(suppress_health_check=[HealthCheck.too_slow])  # drawing arrays is slow on a loaded machine
def test_a_pushed_gradient_decodes_to_what_was_encoded(gradient, encoding):
    headers, body = encode_push({"loss": 1.0}, gradient, encoding)
    decoded = decode_tensor(body, encoding)
    expected = gradient.astype(np.float16).astype(np.float32) if encoding == "float16" else gradient
    np.testing.assert_array_equal(decoded, expected)
    assert json.loads(headers["Fleet-Meta"]).get("encoding", "float32") == encoding


@given(st.binary(max_size=64), st.sampled_from(["float32", "float16", "int8", ""]))
def test_any_body_decodes_or_is_refused_as_a_wire_error(body, encoding):
    try:
        decoded = decode_tensor(body, encoding)
    except WireError:
        width = {"float32": 4, "float16": 2}.get(encoding)
        assert width is None or len(body) % width
    else:
        assert decoded.dtype == np.float32 and decoded.size * {"float32": 4, "float16": 2}[encoding] == len(
            body
        )


@pytest.fixture
def granted(make_api):
    """An app, a device's auth headers, and a task id it may push to."""
    api = make_api(rate_limit_per_second=1e6, rate_limit_burst=10**6)
    auth = api.enroll()
    counts = [1] * 10

    def grant() -> str:
        answer = api.http.post("/v1/tasks", json={"label_counts": counts}, headers=auth)
        assert answer.status_code == 201, answer.text
        return answer.json()["task_id"]

    return api, auth, grant


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=HEADER_TEXT, body=st.binary(max_size=256))
def test_any_fleet_meta_and_body_get_a_4xx_with_a_json_error(granted, meta, body):
    api, auth, grant = granted
    answer = api.http.post(
        f"/v1/tasks/{grant()}/result",
        content=body,
        headers={**auth, "content-type": "application/octet-stream", "fleet-meta": meta},
    )
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    assert "detail" in answer.json()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    meta=st.dictionaries(
        st.sampled_from(["label_counts", "loss", "compute_time_ms", "batch_size", "x"]),
        st.one_of(
            st.integers(-5, 10**6),
            st.floats(),
            st.text(max_size=5),
            st.lists(st.integers(-3, 50), max_size=12),
        ),
    )
)
def test_any_multipart_meta_gets_an_answer_not_a_crash(granted, meta):
    api, auth, grant = granted
    gradient = np.zeros(api.coordinator.run.manifest.num_params, np.float32)
    try:
        content_type, body = encode_multipart(meta, gradient)
    except ValueError:  # NaN or infinity in the meta: the client refuses to send it
        return
    answer = api.http.post(
        f"/v1/tasks/{grant()}/result", content=body, headers={**auth, "content-type": content_type}
    )
    assert answer.status_code < 500, (answer.status_code, answer.text)
