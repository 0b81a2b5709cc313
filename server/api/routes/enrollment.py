"""Join codes and key revocation for scripts (`fleet demo --phones`): the core methods the console's
"Join a phone" page calls, behind the admin token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, status
from fastapi.concurrency import run_in_threadpool

from server.api.deps import CoordinatorDep
from server.api.errors import INVALID, JSON_BODY, answer
from server.api.schemas import JoinCodeIn, JoinCodeOut
from server.join_links import join_url, public_base

router = APIRouter(prefix="/admin", tags=["admin"])
ACTOR = "admin-api"  # who the key's row says created or revoked it (the console says its user)
KeyId = Annotated[str, Path(max_length=32, pattern=r"^[A-Za-z0-9_-]+$", description="an enrollment key's id")]


@router.post(
    "/join-codes", status_code=status.HTTP_201_CREATED, response_model=JoinCodeOut, responses=JSON_BODY
)
async def create_join_code(body: JoinCodeIn, request: Request, coordinator: CoordinatorDep) -> JoinCodeOut:
    """A short-lived enrollment key and the URL a phone opens to join with it (FLEET_PUBLIC_URL, else this
    request's base URL, + /device/#join=CODE). The code is in this answer only."""
    key, code = await run_in_threadpool(
        lambda: coordinator.devices.create_join_code(body.minutes, actor=ACTOR, max_devices=body.max_devices)
    )
    base = public_base(request.app.state.settings.public_url, str(request.base_url))
    assert key.expires_at is not None  # a join code always ends
    return JoinCodeOut(code=code, url=join_url(base, code), expires_at=key.expires_at, key_id=key.key_id)


@router.post(
    "/enrollment-keys/{key_id}/revoke",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={404: answer("no such enrollment key"), **INVALID},
)
async def revoke_enrollment_key(key_id: KeyId, coordinator: CoordinatorDep) -> None:
    """The key (a join code or any stored key) enrolls nothing from now on; its devices keep their tokens.
    Idempotent."""
    await run_in_threadpool(lambda: coordinator.devices.revoke_enrollment_key(key_id, actor=ACTOR))
