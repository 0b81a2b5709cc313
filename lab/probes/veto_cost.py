"""Issue 30's price of trusted-score's label veto on a real coordinator: the trusted gradients per version.

Without the veto the coordinator computes, per model version, g_s on all the trusted digits and on the
digits of each label a push claims (trusted-score's labelled reference, label-check's rows); the veto asks
for every label's. A live fleet moves one version a push, so this is paid per push. This times both on
the bundled models' ONNX training graphs (the devices' own, what ``server.compose.TrustedGradient`` runs)
over the trusted sample the robust experiment uses (64 digits, three labels claimed a push).

Not an experiment (no results file). ``python -m lab.probes.veto_cost``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def per_version(model: str, trusted: int, claimed: int, rounds: int) -> tuple[float, float]:
    """Seconds per version for g_s on every trusted digit plus ``claimed`` labels' g_s, and plus every
    label's: without the veto and with it."""
    from client import GradientSession
    from models.manifest import builtin
    from sim.data import load_mnist

    bundle = builtin(model)
    session = GradientSession(bundle.manifest, bundle.train_onnx)
    train, _ = load_mnist(seed=0)
    x = train.x[:trusted].astype(np.float32).reshape((-1, *bundle.manifest.input_shape))
    y = train.y[:trusted].astype(np.int64)
    labels = np.unique(y)

    def gradients(which: np.ndarray) -> None:
        session.loss_and_gradient(bundle.init_params, x, y)
        for label in which:
            session.loss_and_gradient(bundle.init_params, x[y == label], y[y == label])

    times = []
    for which in (labels[:claimed], labels):
        gradients(which)  # warm the session
        start = time.perf_counter()
        for _ in range(rounds):
            gradients(which)
        times.append((time.perf_counter() - start) / rounds)
    return times[0], times[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mnist_cnn,mlp")
    parser.add_argument("--trusted", type=int, default=64, help="trusted digits (the experiment's 64)")
    parser.add_argument("--claimed", type=int, default=3, help="labels a push claims")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    for model in args.models.split(","):
        without, with_veto = per_version(model, args.trusted, args.claimed, args.rounds)
        print(
            f"{model}: {without * 1e3:.1f} ms a version without the veto, {with_veto * 1e3:.1f} ms with it"
            f" ({with_veto / without:.2f}x)"
        )


if __name__ == "__main__":
    main()
