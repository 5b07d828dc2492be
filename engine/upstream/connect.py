"""Kafka Connect's REST API: every connector's state, its tasks' states, and the settings
that tie it to topics and a replication slot (``GET /connectors?expand=status&expand=info``,
one request)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from engine.upstream.model import Connector, ConnectorTask

#: Seconds a request to Kafka Connect may take.
TIMEOUT_S = 5.0


class ConnectUnreachable(Exception):
    """Kafka Connect did not answer, or not with its connectors."""


class ConnectUnsupported(ConnectUnreachable):
    """Kafka Connect has no such API (404: e.g. the offsets API before 3.6)."""


def _first_line(trace: str | None) -> str | None:
    if not trace:
        return None
    line = trace.strip().splitlines()[0].strip()
    return line[:300]


def _get(address: str, url: str, timeout: float) -> Any:
    request = urllib.request.Request(address, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - configured http(s) URL
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise ConnectUnsupported(f"Kafka Connect at {url} has no {address}") from None
        raise ConnectUnreachable(f"Kafka Connect at {url} answered HTTP {exc.code}") from None
    except http.client.HTTPException as exc:  # not HTTP there, or cut short
        raise ConnectUnreachable(
            f"Kafka Connect at {url} did not answer over HTTP: {type(exc).__name__}"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectUnreachable(f"Kafka Connect at {url} is unreachable: {reason}") from None
    except ValueError:
        raise ConnectUnreachable(f"Kafka Connect at {url} did not answer with JSON") from None


def connectors(url: str, timeout: float = TIMEOUT_S) -> tuple[Connector, ...]:
    """The connectors of the Kafka Connect cluster at ``url``, by name.

    Raises:
        ConnectUnreachable: no answer, an HTTP error, or not the expected JSON.
    """
    body = _get(f"{url}/connectors?expand=status&expand=info", url, timeout)
    if not isinstance(body, dict):
        raise ConnectUnreachable(f"Kafka Connect at {url} did not list connectors")
    try:
        return tuple(_connector(name, entry) for name, entry in sorted(body.items()))
    except (AttributeError, TypeError, ValueError):
        raise ConnectUnreachable(
            f"Kafka Connect at {url} listed connectors in an unknown form"
        ) from None


def _connector(name: str, entry: dict[str, Any]) -> Connector:
    status = entry.get("status") or {}
    config = (entry.get("info") or {}).get("config") or {}
    top = status.get("connector") or {}
    tasks = tuple(
        ConnectorTask(
            int(t.get("id", 0)), str(t.get("state", "UNKNOWN")), _first_line(t.get("trace"))
        )
        for t in sorted(status.get("tasks") or [], key=lambda t: int(t.get("id", 0)))
    )
    cls = str(config.get("connector.class", "")).lower()
    postgres = "postgres" in cls
    kind = "postgres" if postgres else "mysql" if ("mysql" in cls or "mariadb" in cls) else "other"
    return Connector(
        name=name,
        state=str(top.get("state", "UNKNOWN")),
        prefix=config.get("topic.prefix") or config.get("database.server.name"),
        tasks=tasks,
        slot=(config.get("slot.name") or "debezium") if postgres else None,
        trace=_first_line(top.get("trace")),
        kind=kind,
        signal_table=config.get("signal.data.collection") or None,
    )


def offsets(url: str, name: str, timeout: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """The source offsets connector ``name`` last committed (``GET
    /connectors/<name>/offsets``, Kafka Connect 3.6+): each ``offset`` object.

    Raises:
        ConnectUnreachable: no answer, an HTTP error, or not the expected JSON.
    """
    body = _get(f"{url}/connectors/{urllib.parse.quote(name)}/offsets", url, timeout)
    found = body.get("offsets") if isinstance(body, dict) else None
    if not isinstance(found, list):
        raise ConnectUnreachable(f"Kafka Connect at {url} did not list {name}'s offsets")
    return [o["offset"] for o in found if isinstance(o, dict) and isinstance(o.get("offset"), dict)]
