"""The alerting path's test side: the generated rules tuned the way a team would for fast feedback
(threshold 2, 1m windows, no ``for``), and a real webhook receiving Alertmanager's notifications."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servers import REPO

sys.path.insert(0, str(REPO))

from dashboards import DEFAULT

FAST = DEFAULT.replace(
    recompiles_threshold=2,
    recompiles_window="1m",
    recompiles_for="0s",
    event_window="1m",
    compile_time_window="1m",
    compile_time_for="0s",
    divergence_window="1m",
    divergence_for="0s",
    graph_breaks_window="1m",
    graph_breaks_for="0s",
)


class Webhook:
    """A real HTTP receiver for Alertmanager's webhook notifications."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        received = self.payloads

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's naming
                received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self) -> list[dict[str, Any]]:
        return [alert for payload in self.payloads for alert in payload["alerts"]]

    def wait_for(self, alertname: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for alert in self.alerts():
                if alert["labels"]["alertname"] == alertname and alert["status"] == "firing":
                    return alert
            time.sleep(0.5)
        raise TimeoutError(f"no {alertname} within {timeout}s; received {self.alerts()}")
