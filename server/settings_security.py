"""The security settings (issue 29): proxies, body deadline, the operations token, the login back-off.

A group of its own, mixed into ``server.settings.Settings`` (same FLEET_* variables, same docs table): the
settings module stays about training, and these have one place to be read and reviewed together.
"""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, Field, SecretStr, field_validator


class SecuritySettings(BaseModel):
    trusted_proxies: str = Field(
        "",
        max_length=4096,
        description="comma-separated addresses or networks (10.0.0.0/8) of the reverse proxies whose "
        "X-Forwarded-For and -Proto are believed; empty: none, the connecting address is the client",
    )
    body_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="a request's whole body must arrive within this many seconds of its headers (else 408)",
    )
    ops_token: SecretStr | None = Field(
        None,
        description="when set, /metrics, /docs, /redoc and /openapi.json require it (Authorization: Bearer, "
        "or as the password of HTTP Basic); unset: open to whoever reaches the port",
    )
    login_free_failures: int = Field(
        5,
        ge=1,
        le=1000,
        description="wrong console passwords for one user from one address before each next attempt waits "
        "(1 s, doubling); an address's failures over all users get 4 times as many",
    )
    login_backoff_max_seconds: float = Field(
        900.0, gt=0, le=86_400, description="the longest a login back-off grows to"
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _addresses(cls, value: str) -> str:
        """uvicorn takes a misspelt address for a host name and silently trusts nobody: refuse it here."""
        for item in (part.strip() for part in value.split(",")):
            if item and item != "*":
                try:
                    ipaddress.ip_network(item)
                except ValueError as exc:
                    raise ValueError(f"trusted_proxies: {item!r} is not an address or a network") from exc
        return value

    def proxy_list(self) -> list[str]:
        return [part.strip() for part in self.trusted_proxies.split(",") if part.strip()]


SECURITY_FIELDS: tuple[str, ...] = tuple(SecuritySettings.model_fields)
