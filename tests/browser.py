"""A real browser for the pages vitbench writes: Debian's headless Chromium driven over the DevTools protocol
(a websocket, through aiohttp, which the lock already holds; no browser-driver package).

`open_page(url, png, steps)` starts `chromium --headless=new` with a fresh profile, loads `url`, evaluates each
JavaScript expression of `steps` in the page in order (their values returned), writes a screenshot to `png`, and
reports every console error, uncaught exception, browser-log error and every request for anything other than
the page's own file or inline data (a self-contained page makes none). `CHROMIUM` is None where no browser is
installed: tests skip then, naming the package, except where REQUIRE_ENV is set (.ci/run: CI must have it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REQUIRE_ENV = "VITBENCH_REQUIRE_BROWSER"  # set by .ci/run: a missing browser fails the tests instead of skipping
SKIP_REASON = "no headless Chromium (Debian: apt-get install chromium); the browser tests need it"
START_S = 60.0  # the browser's start-up and the page's load, each, at most (2 busy cores: seconds, not minutes)


@dataclass
class Visit:
    values: list  # each step's value
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, log entries of level error
    requests: list[str] = field(default_factory=list)  # URLs the page asked for (its own file included)


def need_browser():
    """A pytest mark: skip without Chromium, unless REQUIRE_ENV says this machine must have one."""
    import pytest

    return pytest.mark.skipif(CHROMIUM is None and not os.environ.get(REQUIRE_ENV), reason=SKIP_REASON)


def open_page(url: str, png: Path, steps: list[str] = ()) -> Visit:
    if CHROMIUM is None:
        raise RuntimeError(f"${REQUIRE_ENV} is set but {SKIP_REASON}")
    with tempfile.TemporaryDirectory(prefix="vitbench-chromium-") as profile:
        log = open(Path(profile) / "stderr.log", "wb")
        proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                 "--no-default-browser-check", "--disable-extensions", "--hide-scrollbars",
                                 f"--user-data-dir={profile}", "--remote-debugging-port=0",
                                 "--window-size=1280,2000", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=log)
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            t0 = time.monotonic()
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                if proc.poll() is not None or time.monotonic() - t0 > START_S:
                    log.flush()
                    tail = (Path(profile) / "stderr.log").read_text(errors="replace")[-1500:]
                    raise RuntimeError(f"chromium did not start (exit {proc.poll()}): {tail}")
                time.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            return asyncio.run(_visit(port, url, png, list(steps)))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


async def _visit(port: int, url: str, png: Path, steps: list[str]) -> Visit:
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
            targets = await r.json(content_type=None)
        page = next(t for t in targets if t.get("type") == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = _Cdp(ws)
            for domain in ("Runtime", "Log", "Page", "Network"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Page.navigate", url=url)
            await cdp.wait_for("Page.loadEventFired")
            values = []
            for expr in steps:
                res = await cdp.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
                if "exceptionDetails" in res:
                    cdp.visit.errors.append(f"step {expr!r}: {res['exceptionDetails'].get('text')}")
                values.append(res.get("result", {}).get("value"))
            shot = await cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            png.write_bytes(base64.b64decode(shot["data"]))
            await asyncio.sleep(0.2)  # late console messages
            await cdp.drain()
            cdp.visit.values = values
            return cdp.visit


class _Cdp:
    """Calls by id over one page's websocket; events collected into `visit` as they pass."""

    def __init__(self, ws):
        self.ws, self.next_id, self.visit = ws, 0, Visit([])
        self.seen: list[str] = []

    async def call(self, method: str, **params):
        self.next_id += 1
        await self.ws.send_str(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = await self._receive()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def wait_for(self, event: str) -> None:
        while event not in self.seen:
            await self._receive()

    async def drain(self) -> None:
        try:
            while True:
                await asyncio.wait_for(self._receive(), 0.2)
        except asyncio.TimeoutError:
            pass

    async def _receive(self) -> dict:
        msg = json.loads((await asyncio.wait_for(self.ws.receive(), START_S)).data)
        method, p = msg.get("method"), msg.get("params", {})
        if method:
            self.seen.append(method)
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.visit.errors.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.visit.errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                            for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.visit.errors.append(f"log: {p['entry'].get('text')} ({p['entry'].get('url', '')})")
        elif method == "Network.requestWillBeSent":
            self.visit.requests.append(p["request"]["url"])
        return msg
