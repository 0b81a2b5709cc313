"""Helpers shared by the tests (and by the lab's benchmarks, which run the same real processes)."""
