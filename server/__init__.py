"""The Fleet coordinator: a plain core (tasks, strategies, storage) and a thin FastAPI layer over it."""
