"""A Flower client: one device of the workload (its shard and its delay from the SuperNode's node
config), local SGD on its 200 digits from the global model it is sent."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fleetpeer import task

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)  # like Fleet's workers: one compute thread per device
    cfg, node = context.run_config, context.node_config
    device = int(node["partition-id"])
    model = task.fleet_model(str(cfg["fleet-root"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    x, y = task.load_npz(Path(str(node["shard"])))
    conf = msg.content["config"]
    began = time.time()
    stats = task.train(
        model,
        x,
        y,
        epochs=int(conf["local-epochs"]),
        lr=float(conf["lr"]),
        batch=int(conf["batch-size"]),
        delay_ms=float(node["delay-ms"]),
        seed=device * 100_003 + int(conf["server-round"]),
    )
    task.log_fit(str(cfg["fits"]), device, int(conf["server-round"]), began, stats)
    metrics = MetricRecord(
        {"num-examples": len(y), "steps": stats.steps, "compute-s": stats.compute_s, "sleep-s": stats.sleep_s}
    )
    return Message(RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics}), reply_to=msg)
