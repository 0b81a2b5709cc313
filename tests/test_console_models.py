"""The console's models page as a registry (issue 29): its inference download is the API's runnable
model, a rollback offers no re-applying "roll back", notes are escaped, a new head shows its accuracy,
and the API's version listing carries the same lineage."""

from __future__ import annotations

import html
import re
import time

import numpy as np
import onnxruntime as ort
import pytest

from sim.data import load_mnist
from tests.conftest import Api
from tests.test_console import console, csrf, login  # noqa: F401 (``console``: the fixture)


def run_model(data: bytes, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["x"]  # the weights are inside, not inputs
    return session.run(None, {"x": x})[0]


def test_the_console_and_the_api_download_the_same_runnable_inference_model(console):  # noqa: F811
    client = console()
    login(client)
    coordinator = client.app.state.coordinator
    model_id = coordinator.run.model_id
    test = load_mnist(train_size=4990)[1]
    digit = test.x[:1]  # a real handwritten digit
    from_console = client.get(f"/admin/models/{model_id}/infer.onnx")
    from_api = client.get(f"/v1/models/{model_id}/inference.onnx")
    assert from_console.status_code == from_api.status_code == 200
    console_logits, api_logits = run_model(from_console.content, digit), run_model(from_api.content, digit)
    assert console_logits.shape == (1, 10)
    np.testing.assert_array_equal(console_logits, api_logits)
    assert f'filename="{model_id}-v0.onnx"' in from_console.headers["content-disposition"]
    older = client.get(f"/admin/models/{model_id}/infer.onnx", params={"version": 0})
    np.testing.assert_array_equal(run_model(older.content, digit), api_logits)
    assert client.get(f"/admin/models/{model_id}/infer.onnx", params={"version": 9}).status_code == 404


def test_after_a_rollback_the_page_offers_no_rollback_that_reapplies_it(console):  # noqa: F811
    client = console()
    login(client)
    model_id = client.app.state.coordinator.run.model_id
    token = csrf(client)
    note = "<script>alert(1)</script> bad head"
    promoted = client.post(
        f"/admin/models/{model_id}/versions/0/promote", data={"csrf_token": token, "note": "try v0"}
    )
    assert "version 1" in promoted.text
    assert "Roll back to " + model_id + " v0" in promoted.text  # undoes the promotion: v0 comes back
    rolled = client.post("/admin/models/rollback", data={"csrf_token": token, "note": note})
    assert "rolled back" in rolled.text and "rollback</strong> to v0" in rolled.text
    assert "Roll back to" not in rolled.text  # nothing left to undo: no button re-applying v1
    assert "Promote v1 again" in rolled.text  # the explicit redo
    assert note not in rolled.text and html.escape(note, quote=True) in rolled.text
    listed = client.get(f"/v1/models/{model_id}/versions").json()
    assert [(v["version"], v["origin"], v["source_version"], v["note"]) for v in listed] == [
        (0, "initial", None, None),
        (1, "promotion", 0, "try v0"),
        (2, "rollback", 0, note),
    ]
    edited = client.post(
        f"/admin/models/{model_id}/versions/1/note", data={"csrf_token": token, "note": "superseded"}
    )
    assert "note of version 1" in edited.text and 'value="superseded"' in edited.text
    audit = html.unescape(client.get("/admin/audit").text)  # says what came back, not "to version 2"
    sentence = f"rolled back {model_id} version 1 to the parameters of version 0 (now {model_id} version 2)"
    assert sentence in audit
    refused = client.post(
        f"/admin/models/{model_id}/versions/1/note", data={"csrf_token": token, "note": "x" * 501}
    )
    assert "at most 500 characters" in refused.text
    assert client.get(f"/v1/models/{model_id}/versions").json()[1]["note"] == "superseded"


@pytest.mark.timeout(120)
def test_a_promoted_head_shows_its_accuracy_at_once(console, tmp_path):  # noqa: F811
    test = load_mnist(train_size=4900)[1]
    eval_data = test.save(tmp_path / "test.npz")
    client = console(eval_data=eval_data, eval_every_versions=10_000, eval_interval_s=86_400)
    login(client)
    coordinator = client.app.state.coordinator
    model_id = coordinator.run.model_id
    deadline = time.monotonic() + 60
    while coordinator.store.latest_evaluation(model_id) is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the loop evaluates v0 first; then it is not due again for a day
    v0 = coordinator.store.latest_evaluation(model_id).accuracy
    page = client.post(f"/admin/models/{model_id}/versions/0/promote", data={"csrf_token": csrf(client)})
    head = re.search(r"<tr><td>1</td>.*?</tr>", page.text, re.S).group(0)
    assert "—" not in head and f"{v0:.3g}" in head  # v1 holds v0's parameters: its evaluation
    api = Api(http=client)  # v2: trained, never evaluated; promoting it asks the evaluator (compose.py)
    headers = api.enroll()
    task = api.task(headers).json()
    gradient = np.full(coordinator.run.manifest.num_params, 0.01, np.float32)
    assert api.push(headers, task["task_id"], gradient).status_code == 200
    page = client.post(f"/admin/models/{model_id}/versions/2/promote", data={"csrf_token": csrf(client)})
    head = re.search(r"<tr><td>3</td>.*?</tr>", page.text, re.S).group(0)
    assert "—" not in head and [e.version for e in coordinator.store.evaluations(model_id)] == [0, 1, 3]
