"""The console's pages (GET, read-only) and the data behind their charts, as JSON, CSV and plotly figures."""

from __future__ import annotations

import csv
import io
from functools import lru_cache
from typing import Any, Literal, get_args, get_origin

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from fleet_protocol.accounting import STATEMENT
from server.console.charts import CHARTS
from server.console.figures import DATASETS, MEETS_SLO_PCT, Figures
from server.console.labels import metric_label
from server.console.models import page_data
from server.console.sentences import audit_sentence, innermost, panels, strategy_summary
from server.console.web import Session, console_state, coordinator_of, render
from server.core.devices import DeviceRegistry
from server.core.enrollment import BOOTSTRAP_KEY
from server.core.errors import CoordinatorError
from server.core.lineage import MAX_NOTE
from server.settings import LIVE_SETTINGS, Settings
from server.strategies import STRATEGIES, WRAPPERS

router = APIRouter()
PAGE_SIZE = 100


def _figures(request: Request) -> Figures:
    return Figures(coordinator_of(request))


# -- pages -------------------------------------------------------------------------------------------
@router.get("", include_in_schema=False)
async def overview(request: Request, session: Session, msg: str | None = None) -> Response:
    data = await run_in_threadpool(lambda: _figures(request).overview())
    metric = _metric(request)
    return render(request, "overview.html", overview=data, msg=msg, metric=metric[:1].upper() + metric[1:])


def _metric(request: Request) -> str:
    """The evaluation's name (test accuracy; F1@5 on the freshest hour in the drift demo)."""
    settings = console_state(request).settings
    return metric_label(settings.eval_metric, settings.eval_label)


@router.get("/learning", include_in_schema=False)
async def learning(request: Request, session: Session) -> Response:
    run = coordinator_of(request).run
    described = run.strategy.describe() if run else {}
    return render(
        request,
        "learning.html",
        strategy=described,
        summary=strategy_summary(described),
        panels=panels(run.strategy if run else None),
    )


@router.get("/devices", include_in_schema=False)
async def devices(
    request: Request,
    session: Session,
    page: int = Query(0, ge=0, le=100_000),
    device_model: str | None = Query(None, max_length=120),
    key: str | None = Query(None, max_length=32, description="only the devices this enrollment key enrolled"),
    msg: str | None = None,
) -> Response:
    def read() -> dict[str, Any]:
        figures = _figures(request)
        store = figures.store
        return {
            "model_rows": figures.device_models({}),
            "slo_ms": float(figures.coordinator.profiler.time_slo_ms),
            "devices": store.devices(
                offset=page * PAGE_SIZE, limit=PAGE_SIZE, device_model=device_model, enrollment_key_id=key
            ),
        }

    data = await run_in_threadpool(read)
    return render(
        request,
        "devices.html",
        **data,
        page_number=page,
        page_size=PAGE_SIZE,
        device_model=device_model,
        key=key,
        meets_slo_pct=MEETS_SLO_PCT,
        msg=msg,
    )


@router.get("/devices/models/{device_model:path}", include_in_schema=False)  # a name may hold "/"
async def device_model_page(request: Request, session: Session, device_model: str) -> Response:
    coordinator = coordinator_of(request)
    try:
        profile = await run_in_threadpool(coordinator.profiles.device_model, device_model, limit=50)
    except CoordinatorError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from exc
    return render(
        request, "device_model.html", device_model=device_model, profile=profile,
        profiler=coordinator.profiles.settings(),
    )  # fmt: skip


@router.get("/models", include_in_schema=False)
async def models(
    request: Request, session: Session, msg: str | None = None, error: str | None = None
) -> Response:
    listed, history = await run_in_threadpool(page_data, coordinator_of(request))
    return render(
        request, "models.html", models=listed, history=history, max_note=MAX_NOTE, msg=msg, error=error
    )


@router.get("/settings", include_in_schema=False)
async def settings_page(request: Request, session: Session, msg: str | None = None) -> Response:
    return await render_settings(request, msg=msg)


async def render_settings(request: Request, status_code: int = 200, **context: Any) -> Response:
    """The settings page (also re-shown with errors by a refused change, or once with a new key).

    The strategy's fields are those of the running strategy's own settings model, the wrappers' those of
    each configured wrapper's (server/strategies registries): the form's names are ``strategy.<field>``
    and ``wrappers.<i>.<field>`` (server/console/actions.py reads them back)."""
    console = console_state(request)
    current = console.settings
    plain = {title: list(names) for title, names in LIVE_SETTINGS.items() if title != "Learning"}
    run = coordinator_of(request).run
    running = innermost(run.strategy) if run else None
    strategy = [
        _input(f"strategy.{name}", field, getattr(current.strategy, name), getattr(running, name, None))
        for name, field in type(current.strategy).model_fields.items()
        if name != "name"
    ]
    wrappers = [
        {
            "index": i,
            "name": config.name,
            "fields": [
                _input(f"wrappers.{i}.{name}", field, getattr(config, name))
                for name, field in type(config).model_fields.items()
                if name != "name"
            ],
        }
        for i, config in enumerate(current.wrappers)
    ]
    keys = await run_in_threadpool(key_rows, coordinator_of(request).devices)
    return render(
        request,
        "settings.html",
        status_code,
        groups=plain,
        kinds=_input_kinds(),
        fields=_top_level(),
        current=current,
        strategy_names=sorted(STRATEGIES),
        strategy_fields=strategy,
        wrappers=wrappers,
        wrapper_names=list(WRAPPERS),
        keys=keys,
        **context,
    )


def key_rows(devices: DeviceRegistry) -> list[dict[str, Any]]:
    """The Enrollment keys panel's rows: the bootstrap key, then the stored keys, each with the devices it
    enrolled (revoked ones included: they keep their slot) against its quota. Two queries: the keys and
    one grouped count. Join codes (keys that expire) are the Join a phone page's (server/console/join.py)."""
    counts = devices.devices_per_key()
    rows = []
    for key in [BOOTSTRAP_KEY, *(k for k in devices.enrollment_keys() if k.expires_at is None)]:
        enrolled, quota = counts.get(key.key_id, 0), devices.quota(key)
        full = quota is not None and enrolled >= quota
        rows.append({"key": key, "enrolled": enrolled, "quota": quota, "own": key.max_devices, "full": full})
    return rows


def input_kind(annotation: Any) -> Any:
    """A setting's form input: "bool" (checkbox), a list of choices (select), "optional" (text, empty =
    the default) or "value" (text)."""
    if annotation is bool:
        return "bool"
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    return "optional" if type(None) in get_args(annotation) else "value"


def _input(form_name: str, field: Any, value: Any, effective: Any = None) -> dict[str, Any]:
    """A form field; ``effective`` is what an unset (None) value means in the running strategy (its own
    default, e.g. learning rate 0.2), shown so that "default" is never the only answer."""
    kind = input_kind(field.annotation)
    return {
        "name": form_name,
        "kind": kind,
        "value": value,
        "help": field.description,
        "default": field.default,
        "effective": effective if value is None else None,
    }


@lru_cache(maxsize=1)
def _top_level() -> dict[str, dict[str, Any]]:
    """Per top-level setting, its help text and default (the pydantic Field's)."""
    return {
        name: {"help": field.description, "default": field.default}
        for name, field in Settings.model_fields.items()
    }


@lru_cache(maxsize=1)
def _input_kinds() -> dict[str, Any]:
    """Per top-level setting, its form input (``input_kind``)."""
    return {name: input_kind(field.annotation) for name, field in Settings.model_fields.items()}


@router.get("/privacy", include_in_schema=False)
async def privacy(request: Request, session: Session, page: int = Query(0, ge=0, le=100_000)) -> Response:
    """ε per device and overall against the budget, and the assumption every figure rests on."""
    ledger = coordinator_of(request).privacy
    if ledger is None:  # DP off: a statement, no chart, so no plotly.js to load
        return render(request, "privacy.html", overview=None, charts=False)
    overview = await run_in_threadpool(ledger.overview)
    devices = sorted(overview["devices"], key=lambda v: v["epsilon"], reverse=True)
    shown = devices[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]
    return render(
        request,
        "privacy.html",
        overview=overview,
        devices=shown,
        page_number=page,
        page_size=PAGE_SIZE,
        statement=STATEMENT,
    )


@router.get("/audit", include_in_schema=False)
async def audit_page(request: Request, session: Session, page: int = Query(0, ge=0, le=100_000)) -> Response:
    store = console_state(request).store
    entries = await run_in_threadpool(store.audit_entries, limit=PAGE_SIZE, offset=page * PAGE_SIZE)
    said = [(e, audit_sentence(e.action, e.detail)) for e in entries]
    return render(request, "audit.html", entries=said, page_number=page, page_size=PAGE_SIZE)


# -- data ----------------------------------------------------------------------------------------
@router.get("/data/overview.json", include_in_schema=False)
async def overview_data(request: Request, session: Session) -> JSONResponse:
    return JSONResponse(await run_in_threadpool(lambda: _figures(request).overview()))


@router.get("/data/{name}.{fmt}", include_in_schema=False)
async def dataset(request: Request, session: Session, name: str, fmt: str) -> Response:
    """A chart's data: ``.json`` ({"columns", "rows"}) or ``.csv``; query parameters select (device_model)."""
    if name not in DATASETS or fmt not in ("json", "csv"):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no dataset {name}.{fmt}")
    spec = DATASETS[name]
    query = dict(request.query_params)
    rows = await run_in_threadpool(lambda: spec.rows(_figures(request), query))
    if fmt == "json":
        return JSONResponse({"title": spec.title, "columns": list(spec.columns), "rows": rows})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(spec.columns)
    writer.writerows(rows)
    headers = {"Content-Disposition": f'attachment; filename="fleet-{name}.csv"'}
    return Response(out.getvalue(), media_type="text/csv", headers=headers)


@router.get("/charts/{name}", include_in_schema=False)
async def chart(request: Request, session: Session, name: str) -> JSONResponse:
    """A plotly figure (data + layout) for ``Plotly.react``, drawn from the chart's dataset."""
    if name not in CHARTS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no chart {name}")
    spec = CHARTS[name]
    query = dict(request.query_params)
    rows = await run_in_threadpool(lambda: DATASETS[spec.dataset].rows(_figures(request), query))
    figure = spec.figure(rows)
    if spec.dataset == "accuracy":  # the y axis says what is measured, the reference line how old it is
        figure["layout"]["yaxis"]["title"]["text"] = _metric(request)
        settings = console_state(request).settings
        age, label = settings.eval_reference_age_s, settings.eval_reference_label
        for trace in figure["data"][1:]:  # the reference line, drawn when evaluations carry one
            trace["name"] = label or (f"the model {age:g} s before" if age else trace["name"])
    return JSONResponse({**figure, "points": len(rows)})
