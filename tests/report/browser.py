"""A real headless Chromium driven over the WebDriver protocol (Debian's `chromedriver`), with the standard
library only: open a page, run JavaScript in it, read its console."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",  # (as root, Chromium refuses to start without it)
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,2000",
]
START_TIMEOUT_S = 60  # chromedriver and the browser start (a hang guard, not a speed limit)


def available() -> str | None:
    """Why the browser cannot run here, or None when it can."""
    for tool in ("chromium", "chromedriver"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install chromium chromium-driver)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One WebDriver session."""

    def __init__(self, base: str, session: str) -> None:
        self.base, self.session = base, session

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.base}/session/{self.session}{path}",
            data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=START_TIMEOUT_S) as response:
            return json.loads(response.read())["value"]

    def open(self, path: Path) -> None:
        self._call("POST", "/url", {"url": path.resolve().as_uri()})

    def run(self, script: str, *args: Any) -> Any:
        """The value of a JavaScript function body (`return ...`) run in the page."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def wait_for(self, script: str, timeout_s: float = START_TIMEOUT_S) -> Any:
        """Run `script` until it returns something truthy (a hang guard, not a speed limit)."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.run(script)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def console(self) -> list[dict]:
        """The browser console's entries since the last call (level, message)."""
        return self._call("POST", "/se/log", {"type": "browser"})

    def screenshot(self, path: Path) -> None:
        import base64

        path.write_bytes(base64.b64decode(self._call("GET", "/screenshot")))


@contextlib.contextmanager
def browser() -> Iterator[Browser]:
    """A headless Chromium session, closed (with its driver) at the end."""
    port = _free_port()
    with tempfile.TemporaryDirectory() as profile:
        driver = subprocess.Popen(
            ["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                try:
                    urllib.request.urlopen(f"{base}/status", timeout=5).read()
                    break
                except (urllib.error.URLError, ConnectionError):
                    if time.monotonic() > deadline or driver.poll() is not None:
                        raise RuntimeError("chromedriver did not start") from None
                    time.sleep(0.1)
            capabilities = {
                "capabilities": {
                    "alwaysMatch": {
                        "browserName": "chrome",
                        "goog:chromeOptions": {
                            "binary": shutil.which("chromium"),
                            "args": [*CHROMIUM_ARGS, f"--user-data-dir={profile}"],
                        },
                        "goog:loggingPrefs": {"browser": "ALL"},
                    }
                }
            }
            request = urllib.request.Request(
                f"{base}/session",
                json.dumps(capabilities).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=START_TIMEOUT_S) as response:
                session = json.loads(response.read())["value"]["sessionId"]
            b = Browser(base, session)
            try:
                yield b
            finally:
                with contextlib.suppress(Exception):
                    b._call("DELETE", "")
        finally:
            driver.terminate()
            driver.wait(timeout=START_TIMEOUT_S)
