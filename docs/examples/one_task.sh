#!/usr/bin/env bash
# One learning task through the REST API with curl and jq, as a device does it: enroll, ask for a task,
# pull the granted version's parameters, compute a real gradient on local data, push it.
#
#   fleet serve --port 8000 &                       # in another terminal (FLEET_* settings)
#   fleet data prepare --devices 20 --out var/data  # local data for the gradient step
#   FLEET_ENROLLMENT_KEY=… docs/examples/one_task.sh
#
# Secrets stay out of argument lists (visible in `ps`): the key goes through the environment, the token
# through a header file only this user can read.
set -euo pipefail
FLEET=${FLEET:-http://127.0.0.1:8000}
DATA=${DATA:-var/data/device_000.npz}
export FLEET_ENROLLMENT_KEY=${FLEET_ENROLLMENT_KEY:-$(jq -r .enrollment_key var/secrets.json)}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
umask 077

# 1. Enroll: a device id and a bearer token (shown once).
jq -n '{enrollment_key: env.FLEET_ENROLLMENT_KEY, device_model: "Galaxy S7"}' |
  curl -sf "$FLEET/v1/devices" -H 'content-type: application/json' --data-binary @- > "$WORK/device.json"
printf 'authorization: Bearer %s\n' "$(jq -r .token "$WORK/device.json")" > "$WORK/auth"

# 2. Ask for a task: the device's features and its local label counts. The answer says which model
#    version to compute on and how many samples (L) fit the time SLO.
python3 -c 'import numpy as np, sys; print(np.bincount(np.load(sys.argv[1])["y"], minlength=10).tolist())' \
  "$DATA" > "$WORK/counts.json"
jq -n --slurpfile counts "$WORK/counts.json" \
  '{features: {available_memory: 2e9, total_memory: 4e9, cpu_freq_sum: 9000}, label_counts: $counts[0]}' |
  curl -sf "$FLEET/v1/tasks" -H @"$WORK/auth" -H 'content-type: application/json' --data-binary @- \
  > "$WORK/task.json"
jq -c '{task_id, model_id, version, batch_size, lease_seconds}' "$WORK/task.json"

# 3. Pull what the task names: the granted version's parameters (raw little-endian float32), the
#    manifest and the ONNX training graph.
for what in params manifest train_graph; do
  curl -sf "$FLEET$(jq -r ".${what}_url" "$WORK/task.json")" -H @"$WORK/auth" -o "$WORK/$what"
done

# 4. The gradient of the mean loss on L local examples (plain onnxruntime, as client/ does), and the
#    push's metadata: the batch's label counts (they sum to L), loss, measured compute time.
python3 - "$WORK" "$DATA" <<'PY'
import json, sys, time
from pathlib import Path
import numpy as np
from client import GradientSession
from fleet_protocol import Manifest

work, data = Path(sys.argv[1]), np.load(sys.argv[2])
task = json.loads((work / "task.json").read_text())
manifest = Manifest.from_json((work / "manifest").read_text())
params = np.fromfile(work / "params", dtype="<f4")
pick = np.random.default_rng().choice(len(data["y"]), task["batch_size"], replace=True)
x, y = data["x"][pick], data["y"][pick]
started = time.perf_counter()
loss, gradient = GradientSession(manifest, (work / "train_graph").read_bytes()).loss_and_gradient(params, x, y)
meta = {"label_counts": np.bincount(y, minlength=manifest.num_classes).tolist(), "loss": float(loss),
        "compute_time_ms": 1000 * (time.perf_counter() - started), "batch_size": int(task["batch_size"])}
np.asarray(gradient, dtype="<f4").tofile(work / "gradient")
(work / "meta.json").write_text(json.dumps(meta))
PY

# 5. Push: the raw gradient as the body, the metadata in the Fleet-Meta header. The answer tells the
#    staleness τ, the weight the strategy gave the gradient, and the model version it produced.
curl -sf "$FLEET/v1/tasks/$(jq -r .task_id "$WORK/task.json")/result" -H @"$WORK/auth" \
  -H 'content-type: application/octet-stream' -H "fleet-meta: $(cat "$WORK/meta.json")" \
  --data-binary @"$WORK/gradient"
echo
