"""What the ServerApp and the ClientApp share: Fleet's own CNN and initial weights, the workload's files,
local SGD with the device's artificial delay, and the test accuracy.

The model is imported from the Fleet checkout (models/zoo.py, the definition Fleet's exporter turns into
the ONNX graphs its devices run), not redefined here, so both systems train the same network.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

MODEL = "mnist_cnn"


def fleet_model(fleet_root: str) -> torch.nn.Module:
    """Fleet's torch definition of the thesis CNN (weights to be loaded: see ``initial_model``)."""
    if fleet_root not in sys.path:
        sys.path.insert(0, fleet_root)
    from models.zoo import BUILTINS

    return BUILTINS[MODEL].build()


def load_flat(model: torch.nn.Module, flat: np.ndarray, manifest: dict) -> None:
    """Load Fleet's flat float32 parameters (a bundle's init.bin layout: the manifest's offsets)."""
    state = {
        p["name"]: torch.from_numpy(flat[p["offset"] : p["offset"] + p["size"]].reshape(p["shape"]).copy())
        for p in manifest["params"]
    }
    model.load_state_dict(state, strict=True)


def flat_params(model: torch.nn.Module, manifest: dict) -> np.ndarray:
    """The module's parameters in Fleet's flat layout (to compare with init.bin)."""
    state = model.state_dict()
    return np.concatenate([state[p["name"]].detach().numpy().ravel() for p in manifest["params"]])


def initial_model(workload: Path, fleet_root: str) -> tuple[torch.nn.Module, dict]:
    """The CNN with the exact initial weights Fleet's coordinator starts from (the workload's copy of
    the bundle's init.bin), and the bundle manifest."""
    manifest = json.loads((workload / "manifest.json").read_text())
    model = fleet_model(fleet_root)
    load_flat(model, np.fromfile(workload / "init.bin", dtype="<f4"), manifest)
    return model, manifest


def load_npz(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    with np.load(path) as data:
        return torch.from_numpy(np.asarray(data["x"], np.float32)), torch.from_numpy(
            np.asarray(data["y"], np.int64)
        )


@dataclass
class TrainStats:
    steps: int = 0
    compute_s: float = 0.0
    sleep_s: float = 0.0


def train(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    epochs: int,
    lr: float,
    batch: int,
    delay_ms: float,
    seed: int,
) -> TrainStats:
    """Plain local SGD, batch ``batch``, reshuffled each epoch; after each step the device sleeps
    ``delay_ms`` per sample of the batch on top of its real compute (the same delay Fleet's workers add)."""
    from models.zoo import BUILTINS

    loss_fn = BUILTINS[MODEL].loss
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    stats = TrainStats()
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), batch):
            index = order[start : start + batch]
            began = time.perf_counter()
            optimizer.zero_grad()
            loss_fn(model(x[index]), y[index]).backward()
            optimizer.step()
            stats.compute_s += time.perf_counter() - began
            pause = len(index) * delay_ms / 1000.0
            time.sleep(pause)
            stats.sleep_s += pause
            stats.steps += 1
    return stats


def log_fit(path: str, device: int, server_round: int, began: float, stats: TrainStats) -> None:
    """Append one fit's timing as a JSON line (the benchmark's clock starts at the first fit)."""
    if not path:
        return
    line = {"device": device, "round": server_round, "began": began, "ended": time.time(), **vars(stats)}
    with open(path, "a") as out:  # one short append per fit: whole lines even from 20 processes
        out.write(json.dumps(line) + "\n")


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Accuracy and mean loss on the held-out digits."""
    from models.zoo import BUILTINS

    model.eval()
    logits = model(x)
    return float((logits.argmax(1) == y).float().mean()), float(BUILTINS[MODEL].loss(logits, y))


def log_evaluation(
    curve: Path,
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    server_round: int,
    initial: np.ndarray,
) -> tuple[float, float]:
    """Evaluate the global model and append the point to the curve file; round 0 also records the
    initial parameters' hash (both sides must start from Fleet's version 0)."""
    import hashlib

    accuracy, loss = evaluate(model, x, y)
    line = {"round": server_round, "at": time.time(), "accuracy": accuracy, "loss": loss}
    if server_round == 0:
        line["init_sha256"] = hashlib.sha256(initial.astype("<f4").tobytes()).hexdigest()
        line["versions"] = {"torch": torch.__version__}
    with curve.open("a") as out:
        out.write(json.dumps(line) + "\n")
    return accuracy, loss
