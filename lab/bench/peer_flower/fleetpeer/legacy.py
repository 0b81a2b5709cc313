"""The same FedAvg run with long-lived processes: ``python -m fleetpeer.legacy server|client``.

Flower 1.41's deployment engine starts a fresh ``flwr-clientapp`` process for every message, so each
client pays Python + torch + flwr start-up every round (about 2 CPU-seconds on the benchmark machine).
The legacy gRPC mode that 1.41 still ships (``flwr.server.start_server`` and ``start_client``,
deprecated since 1.13) keeps one server process and one process per client for the whole run, as
Fleet's devices are: the benchmark runs both modes and says which numbers come from which.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from fleetpeer import task


def _state(model: torch.nn.Module, arrays: list[np.ndarray]) -> None:
    keys = list(model.state_dict())
    model.load_state_dict(
        {k: torch.from_numpy(np.asarray(a).copy()) for k, a in zip(keys, arrays, strict=True)}
    )


def _arrays(model: torch.nn.Module) -> list[np.ndarray]:
    return [t.detach().numpy().copy() for t in model.state_dict().values()]


def server(args: argparse.Namespace) -> None:
    """FedAvg over all clients each round, evaluated on the test digits before round 1 and after each."""
    from flwr.common import ndarrays_to_parameters
    from flwr.server import ServerConfig, start_server
    from flwr.server.strategy import FedAvg

    workload, curve = Path(args.workload), Path(args.curve)
    model, manifest = task.initial_model(workload, args.fleet_root)
    initial = task.flat_params(model, manifest)
    x, y = task.load_npz(workload / "test.npz")

    def evaluate(server_round: int, arrays: list[np.ndarray], _config: dict) -> tuple[float, dict]:
        _state(model, arrays)
        accuracy, loss = task.log_evaluation(curve, model, x, y, server_round, initial)
        return loss, {"accuracy": accuracy}

    config = {"lr": args.lr, "local-epochs": args.local_epochs, "batch-size": args.batch_size}
    strategy = FedAvg(
        fraction_fit=1.0,
        fraction_evaluate=0.0,
        min_fit_clients=args.devices,
        min_evaluate_clients=0,
        min_available_clients=args.devices,
        evaluate_fn=evaluate,
        on_fit_config_fn=lambda server_round: {**config, "server-round": server_round},
        initial_parameters=ndarrays_to_parameters(_arrays(model)),
    )
    start_server(server_address=args.address, config=ServerConfig(num_rounds=args.rounds), strategy=strategy)


def client(args: argparse.Namespace) -> None:
    """One device: local SGD on its shard with its delay, for as long as the server runs rounds."""
    from flwr.compat.client.app import start_client
    from flwr.compat.client.numpy_client import NumPyClient

    torch.set_num_threads(1)  # like Fleet's workers: one compute thread per device
    model = task.fleet_model(args.fleet_root)
    x, y = task.load_npz(Path(args.shard))

    class Device(NumPyClient):
        def fit(self, parameters: list[np.ndarray], config: dict) -> tuple[list[np.ndarray], int, dict]:
            _state(model, parameters)
            began = time.time()
            stats = task.train(
                model,
                x,
                y,
                epochs=int(config["local-epochs"]),
                lr=float(config["lr"]),
                batch=int(config["batch-size"]),
                delay_ms=args.delay_ms,
                seed=args.device * 100_003 + int(config["server-round"]),
            )
            task.log_fit(args.fits, args.device, int(config["server-round"]), began, stats)
            return _arrays(model), len(y), {"steps": stats.steps, "compute-s": stats.compute_s}

    start_client(server_address=args.address, client=Device().to_client(), insecure=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("role", choices=["server", "client"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--fleet-root", required=True)
    parser.add_argument("--curve", default="")
    parser.add_argument("--fits", default="")
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--shard", default="")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    (server if args.role == "server" else client)(args)


if __name__ == "__main__":
    main()
