"""Helpers the tests share: PostgreSQL scratch databases, real processes, in-memory stand-ins."""
