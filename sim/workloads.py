"""The workload suite for choosing and checking a default strategy (issue 28).

A default chosen on one split and checked near its own ceiling plateaued on a sharper split. So a
default is chosen on one half of a suite that varies everything a deployment varies (the split, the
shuffle and test digits, the model, the batch, the fleet size, the device speed spread) and reported
on the other half, which the choice never sees. Each workload is plain data; the simulator builds
its devices from it (``Workload.shards``).
"""

from __future__ import annotations

from sim.workload import Workload

__all__ = ["SUITE", "Workload", "workload"]


# a table, one workload to a line or two: not reformatted
# fmt: off
SUITE: tuple[Workload, ...] = (
    # the split, at the peer benchmark's shape (20 devices, CNN, batch 100, 7x spread)
    Workload("labels1-cnn", "labels-1"),
    Workload("labels2-cnn", "labels-2", data_seed=1, split_seed=1),
    Workload("labels4-cnn", "labels-4", data_seed=2, split_seed=2),
    Workload("adjacent-cnn", "adjacent", data_seed=3),  # issue 28's measured split: 1.4 labels a device
    Workload("adjacent-shuffled", "adjacent", speed_order="shuffled", data_seed=16),
    Workload("dirichlet0.1-cnn", "dirichlet-0.1", data_seed=4, split_seed=4),
    Workload("dirichlet0.5-cnn", "dirichlet-0.5", data_seed=5, split_seed=5),
    Workload("dirichlet10-cnn", "dirichlet-10", data_seed=6, split_seed=6),
    # the model
    Workload("labels2-mlp", "labels-2", model="mlp", data_seed=7, split_seed=7),
    Workload("dirichlet0.5-logreg", "dirichlet-0.5", model="logreg", data_seed=8, split_seed=8),
    Workload("labels1-mlp", "labels-1", model="mlp", data_seed=9, split_seed=9),
    Workload("adjacent-mlp", "adjacent", model="mlp", data_seed=17),  # slowest devices hold 8 and 9
    # the batch
    Workload("labels2-batch32", "labels-2", batch=32, data_seed=10, split_seed=10, gradients=6000),
    Workload("dirichlet0.1-iprof", "dirichlet-0.1", batch=None, data_seed=11, split_seed=11),
    # the fleet size and the speed spread
    Workload("labels2-100dev", "labels-2", devices=100, model="mlp", data_seed=12, split_seed=12,
             gradients=10000),
    Workload("labels1-1000dev", "labels-1", devices=1000, model="mlp", data_seed=13, split_seed=13,
             gradients=8000),
    Workload("dirichlet0.5-even", "dirichlet-0.5", speed_spread=1.0, data_seed=14, split_seed=14),
    Workload("labels4-30x", "labels-4", speed_spread=30.0, data_seed=15, split_seed=15),
    # the second held-back half, drawn before any run on it once the first had been seen (issue 28)
    Workload("labels1-logreg", "labels-1", model="logreg", data_seed=18, split_seed=18),
    Workload("adjacent-30x", "adjacent", speed_spread=30.0, data_seed=19),
    Workload("dirichlet0.5-mlp-batch32", "dirichlet-0.5", model="mlp", batch=32, data_seed=20, split_seed=20,
             gradients=6000),
    Workload("labels2-iprof", "labels-2", batch=None, data_seed=21, split_seed=21),
    Workload("labels2-1000dev", "labels-2", devices=1000, model="mlp", data_seed=22, split_seed=22,
             gradients=8000),
    Workload("labels4-100dev", "labels-4", devices=100, model="mlp", data_seed=23, split_seed=23,
             gradients=10000),
    Workload("dirichlet0.1-even", "dirichlet-0.1", speed_spread=1.0, data_seed=24, split_seed=24),
    Workload("labels1-shuffled", "labels-1", speed_order="shuffled", data_seed=25, split_seed=25),
    # the third held-back half, drawn before any run on it once the second had been reported (issue 28)
    Workload("adjacent-logreg", "adjacent", model="logreg", data_seed=26),
    Workload("labels4-batch32", "labels-4", batch=32, data_seed=27, split_seed=27, gradients=6000),
    Workload("dirichlet10-mlp", "dirichlet-10", model="mlp", data_seed=28, split_seed=28),
    Workload("labels1-100dev", "labels-1", devices=100, model="mlp", data_seed=29, split_seed=29,
             gradients=10000),
    Workload("labels4-1000dev", "labels-4", devices=1000, model="mlp", data_seed=30, split_seed=30,
             gradients=8000),
    Workload("labels2-30x-shuffled", "labels-2", speed_spread=30.0, speed_order="shuffled", data_seed=31,
             split_seed=31),
    Workload("labels1-iprof", "labels-1", batch=None, data_seed=32, split_seed=32),
    Workload("dirichlet10-even", "dirichlet-10", speed_spread=1.0, data_seed=33, split_seed=33),
    # the fourth held-back half, drawn before any run on it once the third had been reported (issue 28);
    # mostly the MLP and logistic regression, whose rates the fourth search chooses
    Workload("labels2-logreg", "labels-2", model="logreg", data_seed=34, split_seed=34),
    Workload("dirichlet0.1-mlp", "dirichlet-0.1", model="mlp", data_seed=35, split_seed=35),
    Workload("labels1-mlp-batch32", "labels-1", model="mlp", batch=32, data_seed=36, split_seed=36,
             gradients=6000),
    Workload("adjacent-mlp-100dev", "adjacent", devices=100, model="mlp", data_seed=37, gradients=10000),
    Workload("adjacent-1000dev", "adjacent", devices=1000, model="mlp", data_seed=38, split_seed=38,
             gradients=8000),
    Workload("labels4-logreg-iprof", "labels-4", model="logreg", batch=None, data_seed=39, split_seed=39),
    Workload("dirichlet0.1-30x", "dirichlet-0.1", speed_spread=30.0, data_seed=40, split_seed=40),
    Workload("labels4-mlp-even", "labels-4", model="mlp", speed_spread=1.0, data_seed=41, split_seed=41),
    # the fifth held-back half, drawn before any run on it once the fourth had been reported (issue 28);
    # mostly the MLP, whose step cap the fifth search chooses, every dimension varied
    Workload("labels2-mlp-30x", "labels-2", model="mlp", speed_spread=30.0, data_seed=42, split_seed=42),
    Workload("dirichlet0.5-mlp-iprof", "dirichlet-0.5", model="mlp", batch=None, data_seed=43, split_seed=43),
    Workload("labels1-mlp-shuffled", "labels-1", model="mlp", speed_order="shuffled", data_seed=44,
             split_seed=44),
    Workload("dirichlet0.1-mlp-100dev", "dirichlet-0.1", devices=100, model="mlp", data_seed=45,
             split_seed=45, gradients=10000),
    Workload("labels2-1000dev-shuffled", "labels-2", devices=1000, speed_order="shuffled", model="mlp",
             data_seed=46, split_seed=46, gradients=8000),
    Workload("adjacent-mlp-even", "adjacent", model="mlp", speed_spread=1.0, data_seed=47),
    Workload("dirichlet0.1-logreg-batch32", "dirichlet-0.1", model="logreg", batch=32, data_seed=48,
             split_seed=48, gradients=6000),
    Workload("dirichlet0.5-cnn-shuffled", "dirichlet-0.5", speed_order="shuffled", data_seed=49,
             split_seed=49),
    # the sixth held-back half, drawn before any run on it once the fifth had been reported (2026-11-28):
    # two CNNs (whose step cap the sixth search chooses), two 100-device MLP fleets (where the fifth's cap
    # let ×2 collapse), every other dimension varied
    Workload("labels1-cnn-30x", "labels-1", speed_spread=30.0, data_seed=50, split_seed=50),
    Workload("dirichlet0.1-cnn-iprof", "dirichlet-0.1", batch=None, data_seed=51, split_seed=51),
    Workload("labels4-mlp-100dev-shuffled", "labels-4", devices=100, model="mlp", speed_order="shuffled",
             data_seed=52, split_seed=52, gradients=10000),
    Workload("dirichlet0.5-mlp-100dev", "dirichlet-0.5", devices=100, model="mlp", data_seed=53,
             split_seed=53, gradients=10000),
    Workload("adjacent-mlp-batch32", "adjacent", model="mlp", batch=32, data_seed=54, gradients=6000),
    Workload("labels1-1000dev-30x", "labels-1", devices=1000, model="mlp", speed_spread=30.0, data_seed=55,
             split_seed=55, gradients=8000),
    Workload("labels1-logreg-shuffled", "labels-1", model="logreg", speed_order="shuffled", data_seed=56,
             split_seed=56),
    Workload("dirichlet0.1-mlp-30x", "dirichlet-0.1", model="mlp", speed_spread=30.0, data_seed=57,
             split_seed=57),
    # the seventh held-back half, drawn before any run on it once the sixth had been reported (2026-11-28):
    # 20-device MLP fleets at a 30x spread (where the sixth's MLP rate was too low), 100 devices of each
    # small model (where a higher one collapsed), logistic regression's rate, one CNN, 1,000 devices
    Workload("dirichlet0.5-mlp-30x", "dirichlet-0.5", model="mlp", speed_spread=30.0, data_seed=58,
             split_seed=58),
    Workload("labels2-mlp-batch32-shuffled", "labels-2", model="mlp", batch=32, speed_order="shuffled",
             data_seed=59, split_seed=59, gradients=6000),
    Workload("labels2-mlp-100dev-30x", "labels-2", devices=100, model="mlp", speed_spread=30.0, data_seed=60,
             split_seed=60, gradients=10000),
    Workload("adjacent-logreg-100dev", "adjacent", devices=100, model="logreg", data_seed=61,
             gradients=10000),
    Workload("dirichlet10-logreg-30x", "dirichlet-10", model="logreg", speed_spread=30.0, data_seed=62,
             split_seed=62),
    Workload("dirichlet0.1-mlp-iprof", "dirichlet-0.1", model="mlp", batch=None, data_seed=63, split_seed=63),
    Workload("labels4-cnn-shuffled", "labels-4", speed_order="shuffled", data_seed=64, split_seed=64),
    Workload("labels4-1000dev-shuffled", "labels-4", devices=1000, model="mlp", speed_order="shuffled",
             data_seed=65, split_seed=65, gradients=8000),
    # the eighth held-back half, drawn before any run on it once the seventh had been reported (2026-11-28):
    # four 20-device MLP fleets (where the seventh's misses were), 100 and 1,000 devices, logistic
    # regression at a 30x spread, one CNN (a Dirichlet split cannot give 1,000 devices two digits each)
    Workload("labels1-mlp-30x", "labels-1", model="mlp", speed_spread=30.0, data_seed=66, split_seed=66),
    Workload("dirichlet10-mlp-batch32", "dirichlet-10", model="mlp", batch=32, data_seed=67, split_seed=67,
             gradients=6000),
    Workload("labels4-mlp-iprof", "labels-4", model="mlp", batch=None, data_seed=68, split_seed=68),
    Workload("adjacent-mlp-30x", "adjacent", model="mlp", speed_spread=30.0, data_seed=69),
    Workload("dirichlet0.1-mlp-100dev-shuffled", "dirichlet-0.1", devices=100, model="mlp",
             speed_order="shuffled", data_seed=70, split_seed=70, gradients=10000),
    Workload("labels2-logreg-30x", "labels-2", model="logreg", speed_spread=30.0, data_seed=71,
             split_seed=71),
    Workload("dirichlet0.5-cnn-30x", "dirichlet-0.5", speed_spread=30.0, data_seed=72, split_seed=72),
    Workload("labels4-1000dev-30x", "labels-4", devices=1000, model="mlp", speed_spread=30.0, data_seed=73,
             split_seed=73, gradients=8000),
    # the ninth held-back half, drawn before any run on it once the eighth had been reported (2026-11-29):
    # three I-Prof fleets (20 and 1,000 devices: where the eighth's one real slow-down was), 100 devices
    # shuffled (its other), batch 32 at a 30x spread, logistic regression on 100 devices and on the adjacent
    # split at a 30x spread, one CNN at batch 32
    Workload("labels2-mlp-iprof", "labels-2", model="mlp", batch=None, data_seed=74, split_seed=74),
    Workload("dirichlet10-mlp-iprof", "dirichlet-10", model="mlp", batch=None, data_seed=75, split_seed=75),
    Workload("labels4-1000dev-iprof", "labels-4", devices=1000, model="mlp", batch=None, data_seed=76,
             split_seed=76, gradients=8000),
    Workload("dirichlet0.5-mlp-100dev-shuffled", "dirichlet-0.5", devices=100, model="mlp",
             speed_order="shuffled", data_seed=77, split_seed=77, gradients=10000),
    Workload("labels2-mlp-batch32-30x", "labels-2", model="mlp", batch=32, speed_spread=30.0, data_seed=78,
             split_seed=78, gradients=6000),
    Workload("dirichlet0.5-logreg-100dev", "dirichlet-0.5", devices=100, model="logreg", data_seed=79,
             split_seed=79, gradients=10000),
    Workload("labels1-cnn-batch32", "labels-1", batch=32, data_seed=80, split_seed=80, gradients=6000),
    Workload("adjacent-logreg-30x", "adjacent", model="logreg", speed_spread=30.0, data_seed=81),
    # the tenth held-back half, drawn before any run on it once the ninth had been reported (2026-11-29):
    # I-Prof fleets of each model and of 1,000 devices (the ninth's MLP I-Prof fleet wanted half the rate),
    # the CNN at batch 32 on the adjacent split (the ninth's wanted 2-4x), batch 32 on 100 devices and at a
    # 30x spread, a shuffled 30x spread
    Workload("labels1-mlp-iprof", "labels-1", model="mlp", batch=None, data_seed=82, split_seed=82),
    Workload("dirichlet0.1-logreg-iprof", "dirichlet-0.1", model="logreg", batch=None, data_seed=83,
             split_seed=83),
    Workload("adjacent-cnn-batch32", "adjacent", batch=32, data_seed=84, split_seed=84, gradients=6000),
    Workload("dirichlet10-cnn-iprof", "dirichlet-10", batch=None, data_seed=85, split_seed=85),
    Workload("labels2-1000dev-iprof", "labels-2", devices=1000, model="mlp", batch=None, data_seed=86,
             split_seed=86, gradients=8000),
    Workload("dirichlet0.5-mlp-100dev-batch32", "dirichlet-0.5", devices=100, model="mlp", batch=32,
             data_seed=87, split_seed=87, gradients=10000),
    Workload("labels4-logreg-batch32-30x", "labels-4", model="logreg", batch=32, speed_spread=30.0,
             data_seed=88, split_seed=88, gradients=6000),
    Workload("dirichlet0.1-mlp-30x-shuffled", "dirichlet-0.1", model="mlp", speed_spread=30.0,
             speed_order="shuffled", data_seed=89, split_seed=89),
    # the eleventh held-back half, drawn before any run on it once the tenth had been reported (2026-11-29),
    # by a seeded draw: random.Random(11) shuffles three CNN, three MLP and two logistic-regression slots,
    # then draws each slot's split, batch (100, 32, I-Prof), fleet (the CNN 20 devices; the MLP 20, 100 or
    # 1,000; logistic regression 20 or 100), speed spread (7x, even, 30x) and order, drawing again where it
    # repeats a workload of the suite (labels1-mlp-30x) or cannot be split (Dirichlet 0.1 on 1,000 devices,
    # twice)
    Workload("labels2-cnn-iprof-even", "labels-2", batch=None, speed_spread=1.0, data_seed=90, split_seed=90),
    Workload("labels1-cnn-batch32-even", "labels-1", batch=32, speed_spread=1.0, data_seed=91, split_seed=91,
             gradients=6000),
    Workload("labels1-cnn-iprof-30x", "labels-1", batch=None, speed_spread=30.0, data_seed=92, split_seed=92),
    Workload("dirichlet0.1-mlp-100dev-batch32-30x", "dirichlet-0.1", devices=100, model="mlp", batch=32,
             speed_spread=30.0, data_seed=93, split_seed=93, gradients=10000),
    Workload("dirichlet10-mlp-100dev-batch32-even", "dirichlet-10", devices=100, model="mlp", batch=32,
             speed_spread=1.0, data_seed=94, split_seed=94, gradients=10000),
    Workload("labels1-mlp-iprof-even", "labels-1", model="mlp", batch=None, speed_spread=1.0,
             speed_order="shuffled", data_seed=95, split_seed=95),
    Workload("adjacent-logreg-iprof-30x-shuffled", "adjacent", model="logreg", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=96, split_seed=96),
    Workload("labels4-logreg-100dev", "labels-4", devices=100, model="logreg", data_seed=97, split_seed=97,
             gradients=10000),
    # the twelfth held-back half, drawn before any run on it once the eleventh had been reported
    # (2026-11-30): `python -m sim.workload_draw 12 98` (sim/workload_draw.py, the eleventh's procedure)
    Workload("labels1-mlp-100dev-batch32-even", "labels-1", devices=100, model="mlp", batch=32,
             speed_spread=1.0, data_seed=98, split_seed=98, gradients=10000),
    Workload("dirichlet0.5-cnn-batch32-30x", "dirichlet-0.5", batch=32, speed_spread=30.0, data_seed=99,
             split_seed=99, gradients=6000),
    Workload("dirichlet0.5-cnn-iprof-even", "dirichlet-0.5", batch=None, speed_spread=1.0, data_seed=100,
             split_seed=100),
    Workload("dirichlet0.1-logreg-30x-shuffled", "dirichlet-0.1", model="logreg", speed_spread=30.0,
             speed_order="shuffled", data_seed=101, split_seed=101),
    Workload("adjacent-mlp-batch32-30x-shuffled", "adjacent", model="mlp", batch=32, speed_spread=30.0,
             speed_order="shuffled", data_seed=102, split_seed=102, gradients=6000),
    Workload("labels2-mlp-100dev-iprof-30x", "labels-2", devices=100, model="mlp", batch=None,
             speed_spread=30.0, data_seed=103, split_seed=103, gradients=10000),
    Workload("adjacent-cnn-iprof-30x-shuffled", "adjacent", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=104, split_seed=104),
    Workload("adjacent-logreg-100dev-iprof-30x", "adjacent", devices=100, model="logreg", batch=None,
             speed_spread=30.0, data_seed=105, split_seed=105, gradients=10000),
    # the thirteenth held-back half, drawn before any run on it once the twelfth had been reported
    # (2026-11-30): `python -m sim.workload_draw 13 106`
    Workload("labels2-mlp-1000dev-shuffled", "labels-2", devices=1000, model="mlp", speed_order="shuffled",
             data_seed=106, split_seed=106, gradients=8000),
    Workload("labels1-cnn-batch32-30x", "labels-1", batch=32, speed_spread=30.0, data_seed=107,
             split_seed=107, gradients=6000),
    Workload("labels4-logreg-even", "labels-4", model="logreg", speed_spread=1.0, data_seed=108,
             split_seed=108),
    Workload("dirichlet10-logreg-100dev-batch32-shuffled", "dirichlet-10", devices=100, model="logreg",
             batch=32, speed_order="shuffled", data_seed=109, split_seed=109, gradients=10000),
    Workload("labels4-cnn-30x-shuffled", "labels-4", speed_spread=30.0, speed_order="shuffled", data_seed=110,
             split_seed=110),
    Workload("dirichlet0.5-mlp-100dev-batch32-30x-shuffled", "dirichlet-0.5", devices=100, model="mlp",
             batch=32, speed_spread=30.0, speed_order="shuffled", data_seed=111, split_seed=111,
             gradients=10000),
    Workload("dirichlet0.5-cnn-30x-shuffled", "dirichlet-0.5", speed_spread=30.0, speed_order="shuffled",
             data_seed=112, split_seed=112),
    Workload("adjacent-mlp-1000dev-iprof-even", "adjacent", devices=1000, model="mlp", batch=None,
             speed_spread=1.0, data_seed=113, split_seed=113, gradients=8000),
    # the fourteenth held-back half, drawn before any run on it once the thirteenth had been reported
    # (2026-11-30): `python -m sim.workload_draw 14 114`
    Workload("labels4-cnn-iprof-30x-shuffled", "labels-4", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=114, split_seed=114),
    Workload("labels4-cnn-batch32-even", "labels-4", batch=32, speed_spread=1.0, data_seed=115,
             split_seed=115, gradients=6000),
    Workload("dirichlet10-mlp-100dev-shuffled", "dirichlet-10", devices=100, model="mlp",
             speed_order="shuffled", data_seed=116, split_seed=116, gradients=10000),
    Workload("labels4-logreg-100dev-batch32-30x", "labels-4", devices=100, model="logreg", batch=32,
             speed_spread=30.0, data_seed=117, split_seed=117, gradients=10000),
    Workload("labels2-logreg-100dev-iprof", "labels-2", devices=100, model="logreg", batch=None,
             data_seed=118, split_seed=118, gradients=10000),
    Workload("dirichlet0.5-mlp-30x-shuffled", "dirichlet-0.5", model="mlp", speed_spread=30.0,
             speed_order="shuffled", data_seed=119, split_seed=119),
    Workload("labels1-mlp-100dev-shuffled", "labels-1", devices=100, model="mlp", speed_order="shuffled",
             data_seed=120, split_seed=120, gradients=10000),
    Workload("adjacent-cnn-iprof-30x", "adjacent", batch=None, speed_spread=30.0, data_seed=121,
             split_seed=121),
    # the fifteenth held-back half, drawn before any run on it once the fourteenth had been reported
    # (2026-11-30): `python -m sim.workload_draw 15 122`
    Workload("labels1-logreg-iprof-30x-shuffled", "labels-1", model="logreg", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=122, split_seed=122),
    Workload("labels2-cnn-even", "labels-2", speed_spread=1.0, data_seed=123, split_seed=123),
    Workload("dirichlet0.5-mlp-100dev-batch32-even", "dirichlet-0.5", devices=100, model="mlp", batch=32,
             speed_spread=1.0, data_seed=124, split_seed=124, gradients=10000),
    Workload("labels4-cnn-batch32-shuffled", "labels-4", batch=32, speed_order="shuffled", data_seed=125,
             split_seed=125, gradients=6000),
    Workload("dirichlet10-logreg-batch32-even", "dirichlet-10", model="logreg", batch=32, speed_spread=1.0,
             data_seed=126, split_seed=126, gradients=6000),
    Workload("dirichlet0.5-mlp-100dev-iprof-shuffled", "dirichlet-0.5", devices=100, model="mlp", batch=None,
             speed_order="shuffled", data_seed=127, split_seed=127, gradients=10000),
    Workload("dirichlet10-cnn-batch32-shuffled", "dirichlet-10", batch=32, speed_order="shuffled",
             data_seed=128, split_seed=128, gradients=6000),
    Workload("dirichlet0.1-mlp-100dev-batch32-30x-shuffled", "dirichlet-0.1", devices=100, model="mlp",
             batch=32, speed_spread=30.0, speed_order="shuffled", data_seed=129, split_seed=129,
             gradients=10000),
    # the sixteenth held-back half, drawn before any run on it once the fifteenth had been reported
    # (2026-12-01): `python -m sim.workload_draw 16 130`
    Workload("labels1-mlp-1000dev-batch32-30x-shuffled", "labels-1", devices=1000, model="mlp", batch=32,
             speed_spread=30.0, speed_order="shuffled", data_seed=130, split_seed=130, gradients=8000),
    Workload("labels2-cnn-iprof-shuffled", "labels-2", batch=None, speed_order="shuffled", data_seed=131,
             split_seed=131),
    Workload("labels4-cnn-batch32-30x-shuffled", "labels-4", batch=32, speed_spread=30.0,
             speed_order="shuffled", data_seed=132, split_seed=132, gradients=6000),
    Workload("labels1-logreg-100dev", "labels-1", devices=100, model="logreg", data_seed=133, split_seed=133,
             gradients=10000),
    Workload("dirichlet10-cnn-iprof-even", "dirichlet-10", batch=None, speed_spread=1.0, data_seed=134,
             split_seed=134),
    Workload("adjacent-logreg-100dev-iprof-shuffled", "adjacent", devices=100, model="logreg", batch=None,
             speed_order="shuffled", data_seed=135, split_seed=135, gradients=10000),
    Workload("labels4-mlp-100dev-batch32-shuffled", "labels-4", devices=100, model="mlp", batch=32,
             speed_order="shuffled", data_seed=136, split_seed=136, gradients=10000),
    Workload("adjacent-mlp-1000dev-batch32-30x", "adjacent", devices=1000, model="mlp", batch=32,
             speed_spread=30.0, data_seed=137, split_seed=137, gradients=8000),
    # the seventeenth held-back half, drawn before any run on it once the sixteenth had been reported
    # (2026-12-01): `python -m sim.workload_draw 17 138`
    Workload("labels1-mlp-even", "labels-1", model="mlp", speed_spread=1.0, data_seed=138, split_seed=138),
    Workload("dirichlet10-cnn-iprof-30x-shuffled", "dirichlet-10", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=139, split_seed=139),
    Workload("labels2-cnn-iprof", "labels-2", batch=None, data_seed=140, split_seed=140),
    Workload("labels2-mlp-1000dev-iprof-30x", "labels-2", devices=1000, model="mlp", batch=None,
             speed_spread=30.0, data_seed=141, split_seed=141, gradients=8000),
    Workload("labels4-mlp-iprof-30x", "labels-4", model="mlp", batch=None, speed_spread=30.0, data_seed=142,
             split_seed=142),
    Workload("dirichlet0.5-cnn-iprof-30x-shuffled", "dirichlet-0.5", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=143, split_seed=143),
    Workload("dirichlet10-logreg-100dev-iprof-shuffled", "dirichlet-10", devices=100, model="logreg",
             batch=None, speed_order="shuffled", data_seed=144, split_seed=144, gradients=10000),
    Workload("labels4-logreg-iprof-30x-shuffled", "labels-4", model="logreg", batch=None, speed_spread=30.0,
             speed_order="shuffled", data_seed=145, split_seed=145),
    # the eighteenth held-back half, drawn before any run on it once the seventeenth had been reported
    # (2026-12-01): `python -m sim.workload_draw 18 146`
    Workload("adjacent-cnn-iprof-shuffled", "adjacent", batch=None, speed_order="shuffled", data_seed=146,
             split_seed=146),
    Workload("dirichlet0.5-mlp-100dev-30x", "dirichlet-0.5", devices=100, model="mlp", speed_spread=30.0,
             data_seed=147, split_seed=147, gradients=10000),
    Workload("dirichlet10-logreg", "dirichlet-10", model="logreg", data_seed=148, split_seed=148),
    Workload("dirichlet0.5-logreg-batch32-30x-shuffled", "dirichlet-0.5", model="logreg", batch=32,
             speed_spread=30.0, speed_order="shuffled", data_seed=149, split_seed=149, gradients=6000),
    Workload("labels2-mlp-100dev-iprof-even", "labels-2", devices=100, model="mlp", batch=None,
             speed_spread=1.0, data_seed=150, split_seed=150, gradients=10000),
    Workload("labels1-mlp-100dev-batch32-shuffled", "labels-1", devices=100, model="mlp", batch=32,
             speed_order="shuffled", data_seed=151, split_seed=151, gradients=10000),
    Workload("dirichlet0.1-cnn-batch32-even", "dirichlet-0.1", batch=32, speed_spread=1.0, data_seed=152,
             split_seed=152, gradients=6000),
    Workload("dirichlet0.1-cnn-iprof-30x", "dirichlet-0.1", batch=None, speed_spread=30.0, data_seed=153,
             split_seed=153),
    # the nineteenth held-back half, drawn before any run on it once the eighteenth had been reported
    # (2026-12-01): `python -m sim.workload_draw 19 154`
    Workload("labels4-mlp-100dev-even", "labels-4", devices=100, model="mlp", speed_spread=1.0, data_seed=154,
             split_seed=154, gradients=10000),
    Workload("labels1-cnn-iprof", "labels-1", batch=None, data_seed=155, split_seed=155),
    Workload("labels1-mlp-100dev-iprof-even", "labels-1", devices=100, model="mlp", batch=None,
             speed_spread=1.0, data_seed=156, split_seed=156, gradients=10000),
    Workload("dirichlet10-cnn-iprof-shuffled", "dirichlet-10", batch=None, speed_order="shuffled",
             data_seed=157, split_seed=157),
    Workload("labels1-logreg-100dev-even", "labels-1", devices=100, model="logreg", speed_spread=1.0,
             data_seed=158, split_seed=158, gradients=10000),
    Workload("adjacent-mlp-100dev-iprof-30x", "adjacent", devices=100, model="mlp", batch=None,
             speed_spread=30.0, data_seed=159, split_seed=159, gradients=10000),
    Workload("dirichlet10-logreg-100dev-iprof", "dirichlet-10", devices=100, model="logreg", batch=None,
             data_seed=160, split_seed=160, gradients=10000),
    Workload("adjacent-cnn-iprof", "adjacent", batch=None, data_seed=161, split_seed=161),
    # the twentieth held-back half, drawn before any run on it once the nineteenth had been reported
    # (2026-12-01): `python -m sim.workload_draw 20 162`
    Workload("labels2-cnn-batch32-30x-shuffled", "labels-2", batch=32, speed_spread=30.0,
             speed_order="shuffled", data_seed=162, split_seed=162, gradients=6000),
    Workload("dirichlet0.5-mlp-100dev-iprof-even", "dirichlet-0.5", devices=100, model="mlp", batch=None,
             speed_spread=1.0, data_seed=163, split_seed=163, gradients=10000),
    Workload("adjacent-mlp-1000dev-30x-shuffled", "adjacent", devices=1000, model="mlp", speed_spread=30.0,
             speed_order="shuffled", data_seed=164, split_seed=164, gradients=8000),
    Workload("labels4-logreg-100dev-iprof-even", "labels-4", devices=100, model="logreg", batch=None,
             speed_spread=1.0, data_seed=165, split_seed=165, gradients=10000),
    Workload("labels1-cnn-even", "labels-1", speed_spread=1.0, data_seed=166, split_seed=166),
    Workload("labels2-mlp-1000dev-iprof-even", "labels-2", devices=1000, model="mlp", batch=None,
             speed_spread=1.0, data_seed=167, split_seed=167, gradients=8000),
    Workload("dirichlet0.1-logreg-100dev-iprof-shuffled", "dirichlet-0.1", devices=100, model="logreg",
             batch=None, speed_order="shuffled", data_seed=168, split_seed=168, gradients=10000),
    Workload("dirichlet0.1-cnn-batch32-shuffled", "dirichlet-0.1", batch=32, speed_order="shuffled",
             data_seed=169, split_seed=169, gradients=6000),
    # the twenty-first held-back half, drawn before any run on it once the twentieth had been reported
    # (2026-12-01): `python -m sim.workload_draw 21 170`
    Workload("dirichlet10-mlp-even", "dirichlet-10", model="mlp", speed_spread=1.0, data_seed=170,
             split_seed=170),
    Workload("dirichlet0.1-cnn-batch32", "dirichlet-0.1", batch=32, data_seed=171, split_seed=171,
             gradients=6000),
    Workload("dirichlet0.5-cnn-batch32-shuffled", "dirichlet-0.5", batch=32, speed_order="shuffled",
             data_seed=172, split_seed=172, gradients=6000),
    Workload("dirichlet0.1-logreg-batch32-30x-shuffled", "dirichlet-0.1", model="logreg", batch=32,
             speed_spread=30.0, speed_order="shuffled", data_seed=173, split_seed=173, gradients=6000),
    Workload("adjacent-logreg-100dev-even", "adjacent", devices=100, model="logreg", speed_spread=1.0,
             data_seed=174, split_seed=174, gradients=10000),
    Workload("labels1-mlp-100dev-iprof-30x-shuffled", "labels-1", devices=100, model="mlp", batch=None,
             speed_spread=30.0, speed_order="shuffled", data_seed=175, split_seed=175, gradients=10000),
    Workload("labels2-mlp-batch32-30x-shuffled", "labels-2", model="mlp", batch=32, speed_spread=30.0,
             speed_order="shuffled", data_seed=176, split_seed=176, gradients=6000),
    Workload("labels1-cnn-30x-shuffled", "labels-1", speed_spread=30.0, speed_order="shuffled", data_seed=177,
             split_seed=177),
    # the twenty-second held-back half, drawn before any run on it once the twenty-first had been reported
    # (2026-12-01): `python -m sim.workload_draw 22 178`
    Workload("dirichlet0.5-logreg-100dev-iprof", "dirichlet-0.5", devices=100, model="logreg", batch=None,
             data_seed=178, split_seed=178, gradients=10000),
    Workload("labels4-logreg-100dev-30x", "labels-4", devices=100, model="logreg", speed_spread=30.0,
             data_seed=179, split_seed=179, gradients=10000),
    Workload("labels4-mlp-batch32", "labels-4", model="mlp", batch=32, data_seed=180, split_seed=180,
             gradients=6000),
    Workload("adjacent-mlp-100dev-30x", "adjacent", devices=100, model="mlp", speed_spread=30.0,
             data_seed=181, split_seed=181, gradients=10000),
    Workload("adjacent-mlp-1000dev-batch32-even", "adjacent", devices=1000, model="mlp", batch=32,
             speed_spread=1.0, data_seed=182, split_seed=182, gradients=8000),
    Workload("dirichlet0.1-cnn-batch32-30x", "dirichlet-0.1", batch=32, speed_spread=30.0, data_seed=183,
             split_seed=183, gradients=6000),
    Workload("labels4-cnn-iprof-even", "labels-4", batch=None, speed_spread=1.0, data_seed=184,
             split_seed=184),
    Workload("dirichlet0.1-cnn-30x-shuffled", "dirichlet-0.1", speed_spread=30.0, speed_order="shuffled",
             data_seed=185, split_seed=185),
)
# fleets of one kind that no half holds, for a probe that wants fresh data of that kind, never in a search:
# issue 28's twenty-third probe (lab/probes/spread_fresh.py), `python -m sim.workload_draw 23 5000 spread`
# when the suite held its first 178 (the twenty-second half has labels4-logreg-100dev-30x too, other digits)
FRESH_FLEETS: tuple[Workload, ...] = (
    Workload("fresh-dirichlet10-mlp-100dev-30x-shuffled", "dirichlet-10", devices=100, model="mlp",
             speed_spread=30.0, speed_order="shuffled", data_seed=5000, split_seed=5000, gradients=10000),
    Workload("fresh-adjacent-mlp-100dev-batch32-30x", "adjacent", devices=100, model="mlp", batch=32,
             speed_spread=30.0, data_seed=5001, split_seed=5001, gradients=10000),
    Workload("fresh-adjacent-mlp-100dev-30x-shuffled", "adjacent", devices=100, model="mlp",
             speed_spread=30.0, speed_order="shuffled", data_seed=5002, split_seed=5002, gradients=10000),
    Workload("fresh-labels1-mlp-1000dev-30x-shuffled", "labels-1", devices=1000, model="mlp",
             speed_spread=30.0, speed_order="shuffled", data_seed=5003, split_seed=5003, gradients=8000),
    Workload("fresh-labels2-logreg-100dev-batch32-30x-shuffled", "labels-2", devices=100, model="logreg",
             batch=32, speed_spread=30.0, speed_order="shuffled", data_seed=5004, split_seed=5004,
             gradients=10000),
    Workload("fresh-labels4-logreg-100dev-30x", "labels-4", devices=100, model="logreg", speed_spread=30.0,
             data_seed=5005, split_seed=5005, gradients=10000),
    Workload("fresh-adjacent-logreg-100dev-batch32-30x", "adjacent", devices=100, model="logreg", batch=32,
             speed_spread=30.0, data_seed=5006, split_seed=5006, gradients=10000),
    Workload("fresh-labels1-mlp-100dev-batch32-30x-shuffled", "labels-1", devices=100, model="mlp", batch=32,
             speed_spread=30.0, speed_order="shuffled", data_seed=5007, split_seed=5007, gradients=10000),
)
# fmt: on


def workload(name: str) -> Workload:
    """The suite's workload called ``name``, or a probe's fresh fleet (ValueError names the suite's)."""
    for w in (*SUITE, *FRESH_FLEETS):
        if w.name == name:
            return w
    raise ValueError(f"unknown workload {name!r}; known: {', '.join(w.name for w in SUITE)}")
