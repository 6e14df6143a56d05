"""JSON bodies the parser cannot take whole (the HTTP side)."""

import pytest

pytestmark = pytest.mark.django_db

DEEP = "[" * 1000 + "]" * 1000


@pytest.mark.parametrize(
    "body",
    [DEEP, '{"winner": ' + DEEP + "}", '{"winner": ' + "[" * 30 + "]" * 30 + "}"],
    ids=["array-1000", "object-1000", "object-30"],
)
@pytest.mark.parametrize(
    "url", ["/api/terms", "/api/battles/00000000-0000-0000-0000-000000000000/vote"]
)
def test_a_json_body_nested_too_deep_is_a_400_naming_the_body(visitor, url, body):
    response = visitor.post(url, data=body, content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid_json" and error["field"] == "body"
    assert "nested" in error["message"]
