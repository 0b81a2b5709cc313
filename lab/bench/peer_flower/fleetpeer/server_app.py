"""The Flower server: synchronous FedAvg over every SuperNode each round, the global model evaluated
on the 1,000 held-out digits before round 1 and after every round.

Each evaluation is appended as one JSON line to the run config's ``curve`` file with its wall time:
the benchmark reads the curve from there and stops the deployment at its target or its time cap.
"""

from __future__ import annotations

from pathlib import Path

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fleetpeer import task

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    workload, curve = Path(str(cfg["workload-dir"])), Path(str(cfg["curve"]))
    model, manifest = task.initial_model(workload, str(cfg["fleet-root"]))
    initial = task.flat_params(model, manifest)
    x, y = task.load_npz(workload / "test.npz")
    devices = int(cfg["devices"])

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        accuracy, loss = task.log_evaluation(curve, model, x, y, server_round, initial)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    strategy = FedAvg(
        fraction_train=1.0,
        fraction_evaluate=0.0,  # evaluation is server-side, on the held-out digits
        min_train_nodes=devices,
        min_available_nodes=devices,
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=int(cfg["rounds"]),
        train_config=ConfigRecord(
            {
                "lr": float(cfg["lr"]),
                "local-epochs": int(cfg["local-epochs"]),
                "batch-size": int(cfg["batch-size"]),
            }
        ),
        evaluate_fn=evaluate,
    )
