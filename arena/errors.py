"""The one domain error the services raise; views and consumers turn it into a 4xx or a frame."""

from typing import Any


class ArenaError(Exception):
    """A failure a client can act on.

    ``code`` is a stable machine-readable string, ``status`` the HTTP status it maps to, and
    ``field`` names the offending input field when there is one.
    """

    def __init__(
        self, code: str, message: str, *, status: int = 400, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.field = field

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return {"error": body}


def not_found(what: str) -> ArenaError:
    return ArenaError("not_found", f"{what} not found.", status=404)
