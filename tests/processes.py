"""End-to-end tests start real coordinator processes through fleet.server_process."""

from fleet.server_process import ADMIN, ENROLL, ServerProcess, free_port

__all__ = ["ADMIN", "ENROLL", "ServerProcess", "free_port"]
