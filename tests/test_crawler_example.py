"""examples/crawler.py against a site served on 127.0.0.1: killed with SIGKILL mid-crawl and
restarted, it loses no page, fetches no acknowledged page again, and every planted near-duplicate
pair (templates, syndicated copies, small edits, soft-404s) ends up flagged."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import fpstore

pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parent.parent
WORDS = [f"w{i}" for i in range(400)]


def _article(seed: int, n: int = 220) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


def _site() -> tuple[dict[str, tuple[int, str, str]], list[tuple[str, str]]]:
    """path → (status, location, html), and the planted near-duplicate pairs (final paths)."""
    bodies: dict[str, str] = {}
    for i in range(30):
        bodies[f"/post/{i}"] = " ".join(_article(i))
    edited = _article(3)
    edited[100] = "changed"
    bodies["/post/3-updated"] = " ".join(edited)  # a small edit
    bodies["/mirror/post/7"] = bodies["/post/7"]  # a syndicated copy
    template = _article(1000, 200)
    for i in range(3):  # pages of one template with little of their own
        bodies[f"/tag/{i}"] = " ".join(template + [f"tag{i}", "only", "here"])
    # Soft-404s: status 200, one "not found" page (with its list of suggestions) for every path.
    soft404 = " ".join(["sorry", "the", "page", "was", "not", "found", "try", "these"] + _article(2000, 150))
    bodies["/gone/1"] = soft404 + " gone one"
    bodies["/gone/2"] = soft404 + " gone two"
    pages: dict[str, tuple[int, str, str]] = {}
    paths = sorted(bodies)
    for n, path in enumerate(paths):
        nav = " ".join(f'<a href="{p}">{p}</a>' for p in paths[n + 1 : n + 4] + paths[: 1 if n else 0])
        extra = '<a href="/old/5">old</a> <a href="/broken">broken</a>' if path == "/post/0" else ""
        html = f"<html><head><title>{path}</title></head><body><nav>{nav} {extra}</nav><article><p>{bodies[path]}</p></article></body></html>"
        pages[path] = (200, "", html)
    pages["/"] = (200, "", "<html><body>" + " ".join(f'<a href="{p}">x</a>' for p in paths[:6]) + "</body></html>")
    pages["/old/5"] = (301, "/post/5", "")  # a redirect
    planted = [("/post/3", "/post/3-updated"), ("/post/7", "/mirror/post/7"), ("/tag/0", "/tag/1"), ("/tag/1", "/tag/2"), ("/gone/1", "/gone/2")]
    return pages, planted


class _Site:
    def __init__(self) -> None:
        self.pages, self.planted = _site()
        self.requests: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server interface
                site.requests.append(self.path)
                status, location, html = site.pages.get(self.path, (404, "", "not here"))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                body = html.encode()
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _crawler(store: Path, seed: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "crawler.py"), "--store", str(store), "--workers", "4", "--delay", "0.01", seed],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def _acked(lines: list[str], base: str) -> set[str]:
    """Paths whose add was acknowledged (the stored URL and the URL that redirected to it)."""
    out = set()
    for line in lines:
        parts = line.split()
        if parts[:1] == ["ack"]:
            out.add(parts[1].removeprefix(base))
            if "from" in parts:
                out.add(parts[parts.index("from") + 1].removeprefix(base))
    return out


def test_crawler_killed_mid_crawl_resumes_without_loss_or_refetch(tmp_path):
    site = _Site()
    store_dir = tmp_path / "crawl"
    started = time.monotonic()
    try:
        first = _crawler(store_dir, site.base + "/")
        lines: list[str] = []
        while sum(line.startswith("ack ") for line in lines) < 12:
            line = first.stdout.readline()
            assert line, f"the crawler ended early: {lines} {first.stderr.read()}"
            lines.append(line.strip())
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        before = _acked(lines, site.base)
        seen = len(site.requests)

        second = _crawler(store_dir, site.base + "/")
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        lines2 = out.splitlines()
        assert lines2[0].startswith("start resumed"), lines2[:2]
        assert lines2[-1].startswith("done"), lines2[-3:]
        refetched = before & set(site.requests[seen:])
        assert not refetched, f"pages acknowledged before the kill were fetched again: {sorted(refetched)}"

        content = {p for p, (status, _, _) in site.pages.items() if status == 200}
        with fpstore.open(store_dir, readonly=True) as store:
            stored = {d.key.removeprefix(site.base): d.id for d in store.documents()}
            assert set(stored) == content, f"missing {sorted(content - set(stored))}, extra {sorted(set(stored) - content)}"
            a, b, _ = store.near_duplicate_pairs()
            pairs = {frozenset(p) for p in zip(a.tolist(), b.tolist())}
        # "ack URL ID near|exact OTHER ...": the duplicate each add's verdict named.
        named = {}
        for line in lines + lines2:
            parts = line.split()
            if parts[:1] == ["ack"] and parts[3] in ("near", "exact"):
                named[parts[1].removeprefix(site.base)] = parts[4].removeprefix(site.base)
        for x, y in site.planted:
            as_pair = frozenset((stored[x], stored[y])) in pairs
            as_verdict = named.get(x) == y or named.get(y) == x
            assert as_pair or as_verdict, f"planted pair {x} {y} not flagged"
        assert named, "no verdict named a duplicate"
        assert "/post/5" in stored and "/old/5" in site.requests  # the redirect was followed
    finally:
        site.close()
    assert time.monotonic() - started < 60


_REDIRECT_CRASH = '''
import asyncio, os, sys
import crawler, fpstore, fpstore.aio

BASE = "http://h"
LONG = " ".join(f"w{i}" for i in range(60))
PAGES = {"/u": ("/f", f"<html><body><p>{LONG} f</p><a href='/c'>c</a></body></html>"),
         "/f": ("/f", f"<html><body><p>{LONG} f</p><a href='/c'>c</a></body></html>"),
         "/b": ("/b", f"<html><body><p>{LONG} b b</p></body></html>"),
         "/c": ("/c", f"<html><body><p>{LONG} c c c</p></body></html>")}

class Resp:
    def __init__(self, url):
        final, html = PAGES[url.removeprefix(BASE)]
        self.url, self.status_code, self.headers, self.text = BASE + final, 200, {"content-type": "text/html"}, html

class Client:
    async def get(self, url, **kw):
        await asyncio.sleep(0.01)
        return Resp(url)

class CrashCrawl(crawler.Crawl):
    async def discover(self, base, html, host):
        if base.endswith("/f"):  # /u redirected to /f: die once /b's add (and checkpoint) committed
            await self.b_committed.wait()
            os._exit(9)
        await super().discover(base, html, host)

    async def visit(self, client, url, host):
        await super().visit(client, url, host)
        if url.endswith("/b"):
            self.b_committed.set()

async def main(phase, path):
    async with fpstore.aio.open(path, k=3) as store:
        resumed = await store.checkpoint(crawler.CHECKPOINT)
        if resumed is None:
            pending, redirects = [BASE + "/u", BASE + "/b"], {}
        else:
            pending, redirects = list(resumed["pending"]), dict(resumed["redirects"])
        crawl = (CrashCrawl if phase == "1" else crawler.Crawl)(store, pending, redirects, 0.0, 0)
        crawl.b_committed = asyncio.Event()
        await asyncio.gather(*(crawl.worker(Client(), "h") for _ in range(2)))
        print(" ".join(sorted(d.key.removeprefix(BASE) for d in store.store.documents())))

asyncio.run(main(sys.argv[1], sys.argv[2]))
'''


def test_a_kill_while_a_redirect_target_is_unstored_loses_no_page(tmp_path):
    """/u redirects to /f; the crawler dies after another page's checkpoint committed but before
    /f's add: the restart must still store /f and what it links to (the redirect was recorded as
    known before its target was stored, so the restart skipped both for good)."""
    script = tmp_path / "redirect_crash.py"
    script.write_text(_REDIRECT_CRASH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")]))
    store = tmp_path / "crawl.fps"
    first = subprocess.run([sys.executable, str(script), "1", str(store)], capture_output=True, text=True, env=env, timeout=60)
    assert first.returncode == 9, first.stderr
    second = subprocess.run([sys.executable, str(script), "2", str(store)], capture_output=True, text=True, env=env, timeout=60)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[-1].split() == ["/b", "/c", "/f"]


_FETCH_ERRORS = '''
import asyncio, sys
import httpx
import crawler, fpstore, fpstore.aio

BASE = "http://h"
LONG = " ".join(f"w{i}" for i in range(60))

class Resp:
    def __init__(self, url, status, html):
        self.url, self.status_code, self.headers, self.text = url, status, {"content-type": "text/html"}, html

class Client:
    async def get(self, url, **kw):
        path = url.removeprefix(BASE)
        if path == "/bad":
            raise httpx.InvalidURL("a link the client refuses")
        if path == "/busy":
            return Resp(url, 503, "")
        links = "<a href='/bad'>b</a><a href='/busy'>s</a><a href='/ok'>o</a>" if path == "/" else ""
        return Resp(url, 200, f"<html><body><p>{LONG} {path}</p>{links}</body></html>")

async def main(path):
    async with fpstore.aio.open(path, k=3) as store:
        crawl = crawler.Crawl(store, [BASE + "/"], {}, 0.0, 0)
        await asyncio.gather(*(crawl.worker(Client(), "h") for _ in range(2)))
        await store.set_checkpoint(crawler.CHECKPOINT, crawl.position())
        print(" ".join(sorted(d.key.removeprefix(BASE) for d in store.store.documents())))
        print(" ".join(sorted(u.removeprefix(BASE) for u in (await store.checkpoint(crawler.CHECKPOINT))["pending"])))

asyncio.run(main(sys.argv[1]))
'''


def test_fetch_errors_neither_stop_the_crawl_nor_lose_the_page(tmp_path):
    """A link the HTTP client refuses (InvalidURL, not an HTTPError) and a 503 leave the crawl
    going and stay in the frontier for the next run (the first ended the crawl with a traceback)."""
    script = tmp_path / "fetch_errors.py"
    script.write_text(_FETCH_ERRORS)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "examples"), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "c.fps")], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    stored, pending = r.stdout.splitlines()[-2:]
    assert stored.split() == ["/", "/ok"]
    assert pending.split() == ["/bad", "/busy"]
