"""Kafka Connect's REST API: every connector's state, its tasks' states, and the settings
that tie it to topics and a replication slot (``GET /connectors?expand=status&expand=info``,
one request)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from engine.upstream.model import Connector, ConnectorTask

#: Seconds a request to Kafka Connect may take.
TIMEOUT_S = 5.0


class ConnectUnreachable(Exception):
    """Kafka Connect did not answer, or not with its connectors."""


def _first_line(trace: str | None) -> str | None:
    if not trace:
        return None
    line = trace.strip().splitlines()[0].strip()
    return line[:300]


def connectors(url: str, timeout: float = TIMEOUT_S) -> tuple[Connector, ...]:
    """The connectors of the Kafka Connect cluster at ``url``, by name.

    Raises:
        ConnectUnreachable: no answer, an HTTP error, or not the expected JSON.
    """
    request = urllib.request.Request(
        f"{url}/connectors?expand=status&expand=info", headers={"Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - configured http(s) URL
            body: Any = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise ConnectUnreachable(f"Kafka Connect at {url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectUnreachable(f"Kafka Connect at {url} is unreachable: {reason}") from None
    except ValueError:
        raise ConnectUnreachable(f"Kafka Connect at {url} did not answer with JSON") from None
    if not isinstance(body, dict):
        raise ConnectUnreachable(f"Kafka Connect at {url} did not list connectors")
    return tuple(_connector(name, entry) for name, entry in sorted(body.items()))


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
    postgres = "postgres" in str(config.get("connector.class", "")).lower()
    return Connector(
        name=name,
        state=str(top.get("state", "UNKNOWN")),
        prefix=config.get("topic.prefix") or config.get("database.server.name"),
        tasks=tasks,
        slot=(config.get("slot.name") or "debezium") if postgres else None,
        trace=_first_line(top.get("trace")),
    )
