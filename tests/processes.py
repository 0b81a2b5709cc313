"""End-to-end tests start real coordinator processes through server.process."""

from server.process import ADMIN, ENROLL, ServerProcess, free_port

__all__ = ["ADMIN", "ENROLL", "ServerProcess", "free_port"]
