"""The coordinator stores a bundle's DP-SGD graph and serves it at ``/v1/models/{id}/graphs/dp.onnx``."""

from __future__ import annotations

import dataclasses

from models.manifest import builtin
from tests.conftest import ADMIN

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def test_dp_graph_is_served_for_a_builtin_and_404_for_a_bundle_without_one(make_api):
    api = make_api()
    info = api.http.get("/v1/models/active").json()
    assert info["has_dp_graph"] is True
    response = api.http.get(f"/v1/models/{info['model_id']}/graphs/dp.onnx")
    assert response.status_code == 200 and response.content == builtin("mnist_cnn").dp_onnx
    assert "immutable" in response.headers["cache-control"]
    assert api.coordinator.catalog.dp_graph(info["model_id"]) == builtin("mnist_cnn").dp_onnx

    mlp = builtin("mlp")
    plain = dataclasses.replace(
        mlp, manifest=dataclasses.replace(mlp.manifest, dp_grad_names=()), dp_onnx=None
    )  # a bundle exported before DP, or of a model with BatchNorm
    uploaded = api.http.post(
        "/v1/admin/models",
        headers=ADMIN_HEADERS,
        files={"bundle": ("b.zip", plain.to_zip(), "application/zip")},
    )
    assert uploaded.status_code == 201, uploaded.text
    model_id = uploaded.json()["model_id"]
    assert uploaded.json()["has_dp_graph"] is False
    missing = api.http.get(f"/v1/models/{model_id}/graphs/dp.onnx")
    assert missing.status_code == 404 and "no DP-SGD graph" in missing.json()["detail"]
    assert api.http.get(f"/v1/models/{model_id}/graphs/train.onnx").content == mlp.train_onnx
    assert api.coordinator.catalog.dp_graph(model_id) is None
    assert not api.coordinator.catalog.has_dp_graph(model_id)
    unknown = api.http.get("/v1/models/nope-000000/graphs/dp.onnx")
    assert unknown.status_code == 404 and "no model" in unknown.json()["detail"]

    with_dp = api.http.post(
        "/v1/admin/models",
        headers=ADMIN_HEADERS,
        files={"bundle": ("b.zip", mlp.to_zip(), "application/zip")},
    )  # an uploaded bundle keeps its DP graph too
    assert with_dp.json()["has_dp_graph"] is True
    served = api.http.get(f"/v1/models/{with_dp.json()['model_id']}/graphs/dp.onnx")
    assert served.content == mlp.dp_onnx
