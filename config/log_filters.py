"""Filters of the site's logging (settings.LOGGING)."""

import logging


class ClientErrorsOneLine(logging.Filter):
    """A request refused with a 4xx is the client's error, not the site's: Django logs it with
    the exception that refused it (a body it could not parse, a bad Host), traceback and all.
    Here such a record keeps one line, the exception's type and message appended, and loses
    the traceback; a 5xx keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int) and status < 500:
            exc = record.exc_info[1]
            if exc is not None:
                # The message is a %-format: the exception's text must not add placeholders.
                cause = f"{type(exc).__name__}: {exc}".replace("%", "%%")
                record.msg = f"{record.msg} ({cause})"
            record.exc_info = None
            record.exc_text = None
        return True
