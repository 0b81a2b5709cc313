"""The served OpenAPI document is enough to write a client: every route's statuses, one error schema,
the push's two body forms and its Fleet-Meta header, the bundle upload, and the raw binary answers."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from server.api.app import create_app
from server.api.errors import Error
from server.api.schemas import ManifestOut
from tests.conftest import ADMIN, settings_for

ERROR_REF = "#/components/schemas/Error"
JSON_IN = {400, 413, 422}  # a JSON body: undecodable, too large, invalid
DEVICE, ADMIN_AUTH = {401}, {401, 403}

# Read from the code paths (deps.py, bodylimit.py, app.py's CoordinatorError mapping, the routes).
STATUSES: dict[tuple[str, str], set[int]] = {
    ("post", "/v1/devices"): {201, 401, 403, 429} | JSON_IN,
    ("post", "/v1/tasks"): {201, 410, 429, 503} | DEVICE | JSON_IN,
    ("post", "/v1/tasks/{task_id}/result"): {200, 403, 404, 409, 410, 413, 415, 422} | DEVICE,
    ("post", "/v1/tasks/{task_id}/decline"): {204, 403, 404, 409} | DEVICE | JSON_IN,
    ("get", "/v1/models"): {200},
    ("get", "/v1/models/active"): {200, 404},
    ("get", "/v1/models/{model_id}"): {200, 404, 422},
    ("get", "/v1/models/{model_id}/manifest"): {200, 404, 422},
    ("get", "/v1/models/{model_id}/graphs/{graph}.onnx"): {200, 404, 422},
    ("get", "/v1/models/{model_id}/versions"): {200, 404, 422},
    ("get", "/v1/models/{model_id}/versions/{version}/params"): {200, 304, 404, 410, 422},
    ("get", "/v1/models/{model_id}/inference.onnx"): {200, 404, 410, 422},
    ("get", "/v1/models/{model_id}/served"): {200, 404, 410, 422},
    ("post", "/v1/admin/models"): {201, 413, 422} | ADMIN_AUTH,
    ("post", "/v1/admin/training/pause"): {204, 404} | ADMIN_AUTH,
    ("post", "/v1/admin/training/resume"): {204, 404} | ADMIN_AUTH,
    ("put", "/v1/admin/training/stop"): {204, 404} | JSON_IN | ADMIN_AUTH,
    ("get", "/v1/admin/stats"): {200} | ADMIN_AUTH,
    ("get", "/v1/admin/evaluations"): {200, 422} | ADMIN_AUTH,
    ("get", "/v1/admin/records"): {200, 422} | ADMIN_AUTH,
    ("post", "/v1/admin/join-codes"): {201} | JSON_IN | ADMIN_AUTH,
    ("post", "/v1/admin/enrollment-keys/{key_id}/revoke"): {204, 404, 422} | ADMIN_AUTH,
    ("get", "/v1/admin/profiler"): {200} | ADMIN_AUTH,
    ("get", "/v1/admin/profiler/{device_model}"): {200, 404, 422} | ADMIN_AUTH,
    ("get", "/v1/privacy/me"): {200, 404, 422} | DEVICE,
    ("get", "/v1/admin/privacy"): {200, 404} | ADMIN_AUTH,
    ("get", "/v1/admin/privacy/devices/{device_id}"): {200, 404, 422} | ADMIN_AUTH,
    ("get", "/v1/admin/privacy/calibrate"): {200, 422} | ADMIN_AUTH,
    ("get", "/v1/health"): {200},
    ("get", "/v1/ready"): {200, 503},
}


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return create_app(settings_for(tmp_path_factory.mktemp("openapi"))).openapi()


def operations(document: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(method, path): op for path, ops in document["paths"].items() for method, op in ops.items()}


def test_every_route_lists_every_status_it_can_answer(document):
    ops = operations(document)
    assert set(ops) == set(STATUSES)
    for key, op in ops.items():
        storage = {503} if key != ("get", "/v1/health") else set()  # storage_unavailable (database down)
        assert {int(code) for code in op["responses"]} == STATUSES[key] | storage, key


def test_every_error_answer_uses_the_one_error_schema(document):
    schemas = document["components"]["schemas"]
    assert "Error" in schemas and not {"HTTPValidationError", "ValidationError", "Rejection"} & set(schemas)
    assert set(schemas["Error"]["properties"]) == {"detail", "reason", "retry_after"}
    assert schemas["Error"]["required"] == ["detail"]
    issue = schemas["ValidationIssue"]
    assert {"loc", "msg", "type", "input", "ctx"} == set(issue["properties"]) and issue["required"] == [
        "loc",
        "msg",
        "type",
    ]
    for key, op in operations(document).items():
        for code, response in op["responses"].items():
            if int(code) >= 400:
                assert response["content"] == {"application/json": {"schema": {"$ref": ERROR_REF}}}, (
                    key,
                    code,
                )


def test_rate_limits_and_rejections_document_retry_after(document):
    ops = operations(document)
    for key, code in [
        (("post", "/v1/tasks"), "429"),
        (("post", "/v1/tasks"), "503"),
        (("post", "/v1/devices"), "429"),
    ]:
        assert ops[key]["responses"][code]["headers"]["Retry-After"]["schema"] == {"type": "integer"}


def test_push_route_documents_both_body_forms_and_the_meta_header(document):
    op = operations(document)[("post", "/v1/tasks/{task_id}/result")]
    body = op["requestBody"]
    assert body["required"] is True
    assert set(body["content"]) == {"application/octet-stream", "multipart/form-data"}
    raw = body["content"]["application/octet-stream"]["schema"]
    assert (raw["type"], raw["format"]) == ("string", "binary")
    form = body["content"]["multipart/form-data"]
    assert form["schema"]["required"] == ["meta", "gradient"]
    assert form["schema"]["properties"]["meta"] == {"$ref": "#/components/schemas/ResultMeta"}
    assert form["schema"]["properties"]["gradient"] == {"type": "string", "format": "binary"}
    assert form["encoding"]["meta"]["contentType"] == "application/json"

    header = next(p for p in op["parameters"] if p["name"] == "Fleet-Meta")
    assert header["in"] == "header" and "octet-stream" in header["description"]
    assert header["schema"]["contentMediaType"] == "application/json"
    assert header["schema"]["contentSchema"] == {"$ref": "#/components/schemas/ResultMeta"}
    meta = document["components"]["schemas"]["ResultMeta"]
    assert {"label_counts", "loss", "compute_time_ms", "energy", "batch_size", "encoding"} == set(
        meta["properties"]
    )
    assert meta["additionalProperties"] is False
    assert op["security"] == [{"DeviceToken": []}]


def test_bundle_upload_documents_its_multipart_part(document):
    op = operations(document)[("post", "/v1/admin/models")]
    form = op["requestBody"]["content"]["multipart/form-data"]
    assert form["schema"]["required"] == ["bundle"]
    bundle = form["schema"]["properties"]["bundle"]
    assert (bundle["type"], bundle["format"]) == ("string", "binary")
    assert op["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ModelOut"
    }


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/v1/models/{model_id}/versions/{version}/params", {"ETag", "Cache-Control"}),
        ("/v1/models/{model_id}/graphs/{graph}.onnx", {"Cache-Control"}),
        ("/v1/models/{model_id}/inference.onnx", {"Cache-Control", "Content-Disposition"}),
        ("/v1/models/{model_id}/served", {"Cache-Control", "Fleet-Version", "Fleet-Served"}),
    ],
)
def test_binary_answers_are_octet_streams_with_their_headers(document, path, headers):
    ok = document["paths"][path]["get"]["responses"]["200"]
    assert ok["content"] == {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}
    assert set(ok["headers"]) == headers


def test_security_schemes_say_which_token_each_route_wants(document):
    assert set(document["components"]["securitySchemes"]) == {"DeviceToken", "AdminToken"}
    for (_, path), op in operations(document).items():
        expected = (
            [{"AdminToken": []}]
            if path.startswith("/v1/admin")
            else [{"DeviceToken": []}]
            if path.startswith(("/v1/tasks", "/v1/privacy"))
            else None
        )
        assert op.get("security") == expected, path


def test_served_manifest_and_errors_match_their_documented_schemas(tmp_path):
    """The schemas are not only declared: real answers validate against them (schemathesis checks every
    route against a live server in test_fuzz_api.py)."""
    with TestClient(create_app(settings_for(tmp_path))) as client:
        model_id = client.get("/v1/models/active").json()["model_id"]
        served = client.get(f"/v1/models/{model_id}/manifest").json()
        assert set(ManifestOut.model_validate(served).model_dump()) == set(served)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        answers = [
            client.post("/v1/tasks", json={"label_counts": [1] * 10}),  # 401
            client.post("/v1/admin/training/pause", headers={"Authorization": "Bearer nope"}),  # 403
            client.get("/v1/models/nope"),  # 404
            client.put("/v1/admin/training/stop", json={"target_accuracy": 2}, headers=admin),  # 422 list
            client.post(
                "/v1/devices",
                content=b'{"enrollment_key": "\xff"}',
                headers={"Content-Type": "application/json"},
            ),  # 400
        ]
        assert [a.status_code for a in answers] == [401, 403, 404, 422, 400]
        for response in answers:
            Error.model_validate(response.json())
        assert client.get("/openapi.json").json() == client.app.openapi()
