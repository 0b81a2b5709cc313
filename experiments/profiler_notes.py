"""The set-up notes both profiler experiments print under their tables (what is real, what is emulated)."""

from __future__ import annotations

__all__ = ["SETUP_NOTES"]

SETUP_NOTES = """## Set-up

- **Simulation.** 36 phone models in `sim/device_catalog.csv` (16 bootstrap, 20 test, disjoint; compute
  speed 12x apart over the test phones, Galaxy S6 / S10 = 7x), each test phone one unit of its model
  with the hidden cost model of `sim/cost.py`: thermal throttling that the battery-temperature reading
  shows only partly, background load (AR(1)), unit-to-unit speed variation, per-task noise, energy from
  power, battery capacity and health and leakage. Noise levels are stated in `sim/cost.py` and were
  fixed before the profiler was tuned. The bootstrap grows batch sizes on the 16 bootstrap phones
  until 2x the SLO (3 runs each, cooled in between); I-Prof's cold start and MAUI both train on it.
- **Comparison.** A round-robin dispatcher alternates each phone's requests between I-Prof and MAUI;
  both learn from every measurement. 28 requests per test phone = 280 tasks per profiler (the thesis's
  "about 280 tasks"; the "first 14 requests" row is the other reading, 140 per profiler, where the
  20 cold-start tasks weigh twice as much).
- **I-Prof settings.** `fleet serve`'s defaults (`profiler.defaults.TUNED_PARAMS`), chosen by
  `fleet experiment profiler-tune` on a validation split: the 16 bootstrap phones in 4 folds (cold
  start on 12, scored on the other 4), seeds 1000-1004; the 20 test phones and seeds 0-4 reported
  here never took part. Personal models start from the cold start's prediction with zero feature
  coefficients (`personal_init="level"`: the cold start's coefficients are between-phone ones,
  confounded, e.g. fast phones run hotter), standardised features clipped at ±3 (`z_clip`) and
  standardised by at least 5% of their mean (`scale_floor`: the short live bootstrap has almost no
  spread in memory and temperature, and live readings otherwise land 10-50 σ away), PA-I cap C = 1
  in units of the mean slope (thesis 0.1). Available memory as a fraction of total memory, used
  before, lost on the validation split (p90 0.589 s vs 0.557 s) and is off. ε = 1% of the
  bootstrap's mean slope (the thesis's 0.1 ms is 1% of a phone's slope; for energy the thesis's
  6e-5 is larger than our slopes and would stop learning). Live, the same settings reach the server
  through `FLEET_PROFILER_PARAMS` (plus ε).
- **Live.** A real `fleet serve` on loopback with `FLEET_PROFILER_BASELINE=maui`; real worker
  processes (`client.Worker`, onnxruntime, the MNIST CNN, batches sampled with replacement from the
  worker's shard) pinned with `os.sched_setaffinity` to core 0, core 1 or both, with 1 or 2 threads,
  next to two competing busy-loops whose duty cycles vary sinusoidally (periods 40 s and 27 s), on a
  2-core machine shared with other jobs (load averages in the table). Compute time is measured
  (`perf_counter` around onnxruntime). Real features: `available_memory`, `total_memory` (psutil) and
  `cpu_freq_sum` (psutil's current frequency summed over the worker's cores; the VM reports no max
  frequency). Emulated: `temperature` (the catalogue phone's thermal model driven by the real busy and
  idle times; no sensor here) and `energy_per_cpu_time` (the phone's power profile). Energy per task =
  emulated power x the task's real CPU seconds. The live bootstrap runs three training set-ups
  (core 0 1 thread; both cores 2 threads; core 1 1 thread with a competing load).
  "One worker per core at a time": a worker holds its cores (flock) for a whole task, as separate
  phones would; "sharing cores": workers on the same core also slow each other down at random.
- **Why live differs from simulation.** A worker's per-sample time changes by up to 5x between two
  of its tasks a few seconds apart (the competing loop's duty cycle moves within 27-40 s, and the
  machine's other jobs come and go: see the load averages); none of the features a phone can read
  sees that load, so any profiler that learns from past tasks meets it as noise. In simulation the
  background load and the thermal state change more slowly than the request rate.
"""
