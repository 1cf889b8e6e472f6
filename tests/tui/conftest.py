"""Helpers for Pilot tests against a real supervisor (the `headless` fixture's runs)."""
from __future__ import annotations

import asyncio
import contextlib
import os
import time

import pytest
from textual.geometry import Region

from mpwatch.sources.local import Client
from mpwatch.tui.app import MpwatchApp
from mpwatch.tui.render import glyphs
from tests.helpers import FIXTURES

WORKER = FIXTURES / "tui_worker.py"


async def until(pilot, pred, timeout: float = 60.0, what: str = "condition"):
    """wait_for for async tests: poll pred() while the app keeps running."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await pilot.pause(0.05)


def worker_of(app, rank):
    return next((w for w in (app.status or {}).get("workers", []) if w["rank"] == rank), None)


def drawn(widget) -> str:
    """What a widget draws, its lines joined and its whitespace folded, so that a phrase
    wrapped over two lines reads whole (the help's key grid wraps a line under its column)."""
    return " ".join(" ".join(strip.text for strip in widget.render_lines(Region(0, 0, *widget.size))).split())


def said(app, fragment: str) -> bool:
    return any(fragment in text for text, _ in app.messages)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Wall-clock times in the screens ("paused at 00:00:08") read the same on every machine:
    the recordings' times are shifted to 2026-01-01 UTC (tests/record.py)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def tui(headless):
    """tui(n=2, env={...}, opts=[...], script=..., args=[...]) -> async context manager yielding
    (app, pilot, run)."""

    @contextlib.asynccontextmanager
    async def make(n=2, env=None, opts=(), size=(120, 40), wait_running=True, script=WORKER, args=()):
        full_env = dict(os.environ, **(env or {}))
        run = headless(script, *args, n=n, opts=opts, env=full_env)
        client = Client.at(run.run_dir)
        app = MpwatchApp(client, run.run_dir, glyphs=glyphs.UNICODE, notices=False)
        try:
            async with app.run_test(size=size) as pilot:
                await until(pilot, lambda: app.snapshots > 0, what="the first snapshot")
                if wait_running:
                    await until(pilot, lambda: all(
                        w["state"] == "running" and w["step"] is not None for w in app.status["workers"])
                        and len(app.status["workers"]) == n, what="all workers running")
                yield app, pilot, run
                if app.poller is not None:
                    app.poller.stop()
        finally:
            client.close()
            await asyncio.sleep(0)

    return make
