"""Path and query parameters several routes share, with the bounds the store needs.

PostgreSQL text cannot hold a NUL character: an identifier holding one names nothing, and looking it up
failed with a 500 there (found by schemathesis). These parameters refuse it with a 422 instead.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from server.api.schemas import NO_NUL

ModelId = Annotated[str, Path(pattern=NO_NUL, description="as listed by GET /v1/models")]
ModelFilter = Annotated[
    str | None, Query(pattern=NO_NUL, description="a model_id (default: the model that trains now)")
]
TaskId = Annotated[str, Path(pattern=NO_NUL, description="the task_id of the grant")]
DeviceModel = Annotated[str, Path(pattern=NO_NUL, description="a device model, as devices enrolled with it")]
