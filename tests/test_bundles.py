"""Bundles are checked before they are stored: zip members, manifest against graphs, a finite pass.

A broken bundle used to become the training model at once (issue 12, defects 3 and 4); here every kind of
breakage is refused with a 422 that names it, and the model in training stays as it was.
"""

from __future__ import annotations

import dataclasses
import io
import json
import warnings
import zipfile

import numpy as np
import pytest

from fleet_protocol import Bundle, ParamSpec, read_zip
from models.check import BundleError, check_bundle, load_checked_zip
from models.manifest import BUNDLE_FILES, builtin
from tests.conftest import ADMIN

ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def _zip(members: list[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate names written on purpose
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, data in members:
                archive.writestr(name, data)
    return buffer.getvalue()


def _with_manifest(bundle: Bundle, **changes: object) -> Bundle:
    return dataclasses.replace(bundle, manifest=dataclasses.replace(bundle.manifest, **changes))


def _reshaped_bias(bundle: Bundle) -> Bundle:
    """fc2.bias (10,) declared as (2, 5): same size and offsets, so only the graphs can tell."""
    params = tuple(
        ParamSpec(p.name, (2, 5), p.offset) if p.name == "fc2.bias" else p for p in bundle.manifest.params
    )
    return _with_manifest(bundle, params=params)


def _nan_init(bundle: Bundle) -> Bundle:
    init = bundle.init_params.copy()
    init[5] = np.nan
    return dataclasses.replace(bundle, init_params=init)


BROKEN: dict[str, tuple[object, str]] = {
    "random train graph": (lambda b: dataclasses.replace(b, train_onnx=b"\x08\x07junk" * 50), "train.onnx"),
    "random infer graph": (lambda b: dataclasses.replace(b, infer_onnx=np.random.bytes(300)), "infer.onnx"),
    "grad names not in graph": (
        lambda b: _with_manifest(b, grad_names=tuple(f"g{i}" for i in range(len(b.manifest.params)))),
        "gradient outputs",
    ),
    "shape disagrees": (_reshaped_bias, "fc2.bias"),
    "wrong input shape": (lambda b: _with_manifest(b, input_shape=(3, 28, 28)), "input .x."),
    "wrong class count": (lambda b: _with_manifest(b, num_classes=7), "logits"),
    "no labels input": (lambda b: dataclasses.replace(b, train_onnx=b.infer_onnx), "'y'"),
    "nan init": (_nan_init, "non-finite"),
}


@pytest.mark.parametrize("name", BUNDLE_FILES)
def test_zip_members_outside_the_four_names_are_refused(name):
    files = builtin("mlp").files()
    good = list(files.items())
    assert read_zip(_zip(good)).keys() == set(BUNDLE_FILES)
    for extra, reason in [
        ("../../x", "unexpected zip member"),
        ("/etc/cron.d/x", "unexpected zip member"),
        (f"sub/{name}", "unexpected zip member"),
        (name, "appears twice"),
    ]:
        with pytest.raises(ValueError, match=reason):
            read_zip(_zip([*good, (extra, files[name])]))


def test_builtin_bundles_pass_the_check():
    for name in ("mnist_cnn", "mlp"):
        check_bundle(builtin(name))
    assert load_checked_zip(builtin("mlp").to_zip()).manifest.name == "mlp"


@pytest.mark.parametrize("breakage", sorted(BROKEN))
def test_broken_bundles_fail_the_check_with_the_reason(breakage):
    breaker, reason = BROKEN[breakage]
    with pytest.raises(BundleError, match=reason):
        load_checked_zip(breaker(builtin("mlp")).to_zip())


def test_malformed_manifests_are_a_bundle_error_not_a_crash():
    files = builtin("mlp").files()
    manifest = json.loads(files["manifest.json"])
    for broken in ({k: v for k, v in manifest.items() if k != "params"}, {**manifest, "params": 3}, []):
        with pytest.raises(BundleError):
            load_checked_zip(_zip([*{**files, "manifest.json": json.dumps(broken).encode()}.items()]))


def test_api_refuses_broken_and_unsafe_bundles_and_keeps_the_active_model(make_api):
    api = make_api()
    headers = api.enroll()
    n = api.coordinator.run.manifest.num_params
    task = api.task(headers).json()
    assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
    before = api.http.get("/v1/models/active").json()
    models_before = api.http.get("/v1/models").json()
    mlp = builtin("mlp")
    uploads = {name: breaker(mlp).to_zip() for name, (breaker, _) in BROKEN.items()}
    files = mlp.files()
    uploads["dot-dot member"] = _zip([*files.items(), ("../../x", b"x")])
    uploads["absolute member"] = _zip([*files.items(), ("/tmp/x", b"x")])
    uploads["duplicate member"] = _zip([*files.items(), ("init.bin", files["init.bin"])])
    for name, data in uploads.items():
        response = api.http.post(
            "/v1/admin/models", headers=ADMIN_HEADERS, files={"bundle": ("b.zip", data, "application/zip")}
        )
        assert response.status_code == 422, (name, response.text)
        assert response.json()["detail"].startswith("invalid bundle: "), name
    assert api.http.get("/v1/models/active").json() == before
    assert api.http.get("/v1/models").json() == models_before
    assert api.coordinator.run.model_id == before["model_id"] and api.coordinator.run.version == 1
    task = api.task(headers).json()
    assert task["model_id"] == before["model_id"]
    assert api.push(headers, task["task_id"], np.full(n, 1e-3)).status_code == 200
