"""RemoteMonitor: POST the epoch logs to a server (standard library only)."""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np

from kiln.callbacks.callback import Callback


class RemoteMonitor(Callback):
    """At the end of every epoch, sends ``{"epoch": epoch, **logs}`` to
    ``root + path`` with an HTTP POST (Keras 3's callback, with :mod:`urllib` instead of
    ``requests``).

    By default the body is form-encoded, one field ``field`` holding the JSON of the logs;
    with ``send_as_json=True`` the body is that JSON itself (``Content-Type:
    application/json``). A server that cannot be reached gives a warning, not an error.

    Args:
        root: the server's root URL ("http://localhost:9000").
        path: the path the events are sent to ("/publish/epoch/end/").
        field: the form field of the data ("data").
        headers: optional dict of extra HTTP headers.
        send_as_json: send the logs as a JSON body (False).

    Example:
        >>> RemoteMonitor(root="http://localhost:8000", send_as_json=True)
    """

    timeout = 10.0  # seconds per request

    def __init__(self, root: str = "http://localhost:9000", path: str = "/publish/epoch/end/",
                 field: str = "data", headers: dict | None = None, send_as_json: bool = False):
        super().__init__()
        self.root = root
        self.path = path
        self.field = field
        self.headers = headers
        self.send_as_json = send_as_json

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        import urllib.error  # here, not at import: `import kiln` stays free of http.client
        import urllib.parse
        import urllib.request

        send: dict[str, Any] = {"epoch": epoch}
        for k, v in (logs or {}).items():
            send[k] = v.item() if isinstance(v, np.ndarray | np.generic) else v
        headers = dict(self.headers or {})
        if self.send_as_json:
            body = json.dumps(send).encode("utf-8")
            headers.setdefault("Content-Type", "application/json")
        else:
            body = urllib.parse.urlencode({self.field: json.dumps(send)}).encode("utf-8")
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
        request = urllib.request.Request(self.root + self.path, data=body, headers=headers,
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                response.read()
        except urllib.error.HTTPError:
            pass  # the server answered (with an error status): like requests.post, no warning
        except (urllib.error.URLError, OSError, ValueError):
            warnings.warn(f"Could not reach RemoteMonitor root server at {self.root}",
                          stacklevel=2)
