"""The API docs work offline: /docs and /redoc load their assets from the coordinator, not a CDN."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from server.api.app import create_app
from tests.conftest import settings_for


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_use_only_assets_the_coordinator_serves(tmp_path, page):
    with TestClient(create_app(settings_for(tmp_path))) as client:
        html = client.get(page)
        assert html.status_code == 200
        sources = re.findall(r'(?:src|href)="([^"]+)"', html.text) + re.findall(r"url: '([^']+)'", html.text)
        assets = [s for s in sources if s.endswith((".js", ".css"))]
        assert assets, html.text[:500]
        for asset in assets:
            assert asset.startswith("/"), f"{page} loads {asset} from elsewhere"
            served = client.get(asset)
            assert served.status_code == 200 and len(served.content) > 10_000
        assert "cdn" not in html.text.lower()
