"""The /v1 route's refusals in OpenAI's error shape (`{"error": {"message", "type", "param", "code"}}`), so that
OpenAI's clients show their messages: FastAPI's request validation and the library's own errors alike."""

from __future__ import annotations

import logging
from contextlib import contextmanager

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from chattts_lab import InvalidRequest, ModelUnavailable, OutOfMemory
from chattts_lab.serve.scheduler import Overloaded

log = logging.getLogger(__name__)


class OpenAIError(Exception):
    """A refusal answered in OpenAI's error shape, so OpenAI's clients show its message."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error", headers: dict | None = None):
        super().__init__(message)
        self.status, self.param, self.code, self.kind, self.headers = status, param, code, kind, headers

    def response(self) -> JSONResponse:
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}
        return JSONResponse({"error": error}, status_code=self.status, headers=self.headers)


def invalid_body(exc: RequestValidationError) -> OpenAIError:
    """FastAPI's validation failure (a bare 422 list) as one OpenAI-shaped 400 naming the first bad field."""
    error = exc.errors()[0]
    param = ".".join(str(part) for part in error["loc"][1:]) or None  # loc starts with "body"
    if error["type"] == "json_invalid":
        return OpenAIError(400, f"the request body is not valid JSON ({error['ctx']['error']})", code="invalid_json")
    if error["type"] == "missing":
        message = f"'{param}' is required" if param else "the request needs a JSON body"
        return OpenAIError(400, message, param, "missing_required_parameter")
    if param is None:
        return OpenAIError(400, f"the request body must be a JSON object: {error['msg']}", code="invalid_type")
    return OpenAIError(400, f"invalid '{param}': {error['msg']} (got {error['input']!r})", param, "invalid_value")


class OpenAIErrorsRoute(APIRoute):
    """A route whose refusals, FastAPI's own validation errors included, are all OpenAI-shaped."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def answer(request):
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return invalid_body(exc).response()
            except OpenAIError as exc:
                return exc.response()

        return answer


@contextmanager
def as_openai_errors():
    """The library's errors for a request it cannot serve, as OpenAI-shaped errors."""
    try:
        yield
    except Overloaded as exc:  # answered at once, so overload never becomes unbounded waiting
        raise OpenAIError(503, str(exc), kind="server_error", code="overloaded",
                          headers={"Retry-After": str(exc.retry_after_s)}) from None
    except OutOfMemory as exc:  # the server and its model are fine; this request was too big for memory
        raise OpenAIError(503, str(exc), kind="server_error", code="out_of_memory") from None
    except ModelUnavailable as exc:
        raise OpenAIError(503, str(exc), kind="server_error", code="model_unavailable") from None
    except InvalidRequest as exc:
        raise OpenAIError(400, str(exc), _param_of(str(exc))) from None
    except OpenAIError:
        raise
    except Exception as exc:  # the synthesis failed (a step, a prompt it could not build): logged, then answered
        log.exception("speech: the synthesis failed")
        raise OpenAIError(500, f"the synthesis failed: {type(exc).__name__}: {exc}", kind="server_error",
                          code="synthesis_failed") from None


# The library's refusals name its own terms; these are the /v1 body fields they are about (OpenAI's `param`).
_PARAMS = (("no text", "input"), ("text", "input"), ("min_new_token", "min_new_token"),
           ("max_new_token", "max_new_token"), ("seeds", "seed"))


def _param_of(message: str) -> str | None:
    return next((param for start, param in _PARAMS if message.startswith(start)), None)
