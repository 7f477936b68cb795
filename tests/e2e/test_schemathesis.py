"""Property-based conformance: schemathesis drives every operation of /openapi.json and checks that no
request yields a 500 and that every response matches its documented schema."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from testing.postgres import scratch_postgres

from .conftest import AUTH_A, build

# built at import: schemathesis parametrizes the test from the app's schema when the module is collected
_database = contextlib.ExitStack()
_url = _database.enter_context(scratch_postgres(prefix="om_e2e"))
_app, _deps, _dispatcher = build(_url)

schema = schemathesis.openapi.from_asgi("/openapi.json", _app).exclude(path_regex=r".*/stream$")


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Any:
    yield
    _dispatcher.close()
    _database.close()


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms(case: Any) -> None:
    # Schema-valid input may still be semantically invalid (an unknown memory option, an empty message, an
    # unknown event type): that is a documented 4xx, not a defect, so "positive data acceptance" is off.
    # Every other check runs: no 5xx, status codes and bodies as documented, content types, headers.
    case.call_and_validate(headers=AUTH_A, excluded_checks=[positive_data_acceptance])
