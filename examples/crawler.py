"""A small asyncio crawler with fpstore as its seen-content store and its checkpoint.

    pip install -e ".[crawler]"
    python examples/crawler.py --store /tmp/crawl-store http://127.0.0.1:8000/

It crawls one site breadth-first from the seed URLs with ``--workers`` concurrent fetches (httpx),
waits ``--delay`` seconds between requests (politeness), follows redirects, reduces each HTML page
to its main content (fpstore's pipeline does) and asks fpstore, for every page, "have I stored
something nearly the same?" It prints one line per stored page::

    ack URL ID new
    ack URL ID near OTHER_URL DISTANCE
    ack URL ID exact OTHER_URL

**Restarts.** Each page is added together with the crawl's frontier (every URL discovered and not
yet stored) as the checkpoint ``crawl``, in the same transaction, the frontier taken when the add
joins the writer's queue (adds commit in that order). After a crash (kill -9 included) the crawler
resumes from the last committed frontier: no discovered page is lost, and no page whose add was
acknowledged is fetched again. Adds from the workers share group commits (``fpstore.aio``). The
frontier rides in the checkpoint, which holds up to 64 KiB: enough for the small sites this
example is for; a large crawl keeps its frontier in a table of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections import deque
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx

import fpstore
import fpstore.aio

CHECKPOINT = "crawl"
_LINK = re.compile(r"""<a\s[^>]*href\s*=\s*["']([^"'#]+)""", re.IGNORECASE)


def links(base: str, html: str, host: str) -> list[str]:
    """Same-host http(s) links of a page, absolute and without fragments, in page order."""
    out = []
    for href in _LINK.findall(html):
        url = urldefrag(urljoin(base, href)).url
        parts = urlsplit(url)
        if parts.scheme in ("http", "https") and parts.netloc == host:
            out.append(url)
    return out


class Crawl:
    """The crawl's state. ``pending``: URLs discovered and not yet queued for an add (an ordered
    set); ``redirects``: redirecting URL → the URL stored for it. The checkpoint records both,
    taken when a page's add joins the writer's queue: adds commit in queue order, so the last
    committed checkpoint names every discovered page that is not stored yet."""

    def __init__(self, store: fpstore.aio.AsyncStore, pending: list[str], redirects: dict[str, str], delay: float, limit: int) -> None:
        self.store, self.delay, self.limit = store, delay, limit
        self.pending: dict[str, None] = dict.fromkeys(pending)
        self.redirects = redirects
        self.queue: deque[str] = deque(pending)
        # A redirect's target may not be stored yet (its add may not have committed): discovery
        # asks the store about it rather than taking it as known.
        self.known: set[str] = set(pending) | set(redirects)
        self.stored = 0
        self.wakeup = asyncio.Event()
        self.busy = 0
        self.polite = asyncio.Lock()

    def position(self) -> dict[str, object]:
        return {"pending": list(self.pending), "redirects": self.redirects}

    def done_with(self, url: str, final: str) -> tuple[str, dict[str, object]]:
        """The checkpoint once ``url`` (stored as ``final``) leaves the frontier: called as its add
        joins the writer's queue, so the redirect is recorded with the add that stores its target."""
        self.pending.pop(url, None)
        self.pending.pop(final, None)
        if final != url:
            self.redirects[url] = final
        return CHECKPOINT, self.position()

    async def fetch(self, client: httpx.AsyncClient, url: str) -> httpx.Response | None:
        async with self.polite:  # one request at a time to the host, ``delay`` apart
            await asyncio.sleep(self.delay)
        try:
            return await client.get(url, follow_redirects=True, timeout=10.0)
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:  # a timeout, a refused connection, a bad link
            print(f"error {url} {type(exc).__name__}", flush=True)
            return None

    async def discover(self, base: str, html: str, host: str) -> None:
        for url in links(base, html, host):
            if url in self.known:
                continue
            self.known.add(url)
            if await self.store.get(url) is not None:  # stored before a restart
                continue
            self.pending[url] = None
            self.queue.append(url)

    async def visit(self, client: httpx.AsyncClient, url: str, host: str) -> None:
        response = await self.fetch(client, url)
        if response is None or response.status_code >= 500:
            return  # maybe transient: it stays in the frontier, for the next run (not this one)
        final = str(response.url)
        if response.status_code != 200 or "html" not in response.headers.get("content-type", ""):
            self.pending.pop(url, None)  # nothing to store; the next checkpoint drops it
            return
        if final != url:
            if final in self.known and final not in self.pending:  # the target is stored or being added
                self.pending.pop(url, None)
                return
            self.known.add(final)
        text = response.text
        await self.discover(final, text, host)
        try:
            result = await self.store.add(final, text=text, checkpoint=lambda: self.done_with(url, final))
        except fpstore.FpstoreError as exc:  # a key over the store's limit, say
            self.pending[url] = None  # back in the frontier: the next checkpoint names it again
            print(f"error {url} {type(exc).__name__}: {exc}", flush=True)
            return
        self.stored += 1
        if result.exact_duplicate_of is not None:
            verdict = f"exact {result.exact_duplicate_of}"
        elif result.near_duplicates:
            nearest = result.near_duplicates[0]
            verdict = f"near {nearest.key} {nearest.distance}"
        else:
            verdict = "new"
        redirected = f" from {url}" if final != url else ""
        print(f"ack {final} {result.id} {verdict}{redirected}", flush=True)

    async def worker(self, client: httpx.AsyncClient, host: str) -> None:
        while True:
            while not self.queue:
                if self.busy == 0 or self.full():
                    self.wakeup.set()  # nothing left anywhere: every worker ends
                    return
                self.wakeup.clear()
                await self.wakeup.wait()
            if self.full():
                return
            url = self.queue.popleft()
            self.busy += 1
            try:
                await self.visit(client, url, host)
            finally:
                self.busy -= 1
                self.wakeup.set()

    def full(self) -> bool:
        return bool(self.limit) and self.stored >= self.limit


async def crawl(args: argparse.Namespace) -> int:
    host = urlsplit(args.seeds[0]).netloc
    async with fpstore.aio.open(args.store, k=args.k) as store:
        resumed = await store.checkpoint(CHECKPOINT)
        if resumed is None:
            pending, redirects = [urldefrag(s).url for s in args.seeds], {}
        else:
            pending, redirects = list(resumed["pending"]), dict(resumed["redirects"])
        print(f"start {'resumed' if resumed is not None else 'fresh'} pending {len(pending)}", flush=True)
        state = Crawl(store, pending, redirects, args.delay, args.limit)
        async with httpx.AsyncClient(headers={"user-agent": "fpstore-example-crawler"}) as client:
            await asyncio.gather(*(state.worker(client, host) for _ in range(args.workers)))
        if not state.full():  # pages that stored nothing (errors, redirects to stored pages) leave it
            await store.set_checkpoint(CHECKPOINT, state.position())
        print(f"done stored {state.stored} pending {len(state.pending)}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("seeds", nargs="+", help="start URLs (the first one's host is the site crawled)")
    ap.add_argument("--store", required=True, help="the fpstore directory (created when missing)")
    ap.add_argument("--workers", type=int, default=8, help="concurrent fetches")
    ap.add_argument("--delay", type=float, default=0.05, help="seconds between two requests to the site")
    ap.add_argument("--limit", type=int, default=0, help="stop after storing this many pages (0: crawl it all)")
    ap.add_argument("-k", type=int, default=3, help="the store's radius (a new store)")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.delay < 0 or args.limit < 0:
        ap.error("--workers must be >= 1, --delay and --limit >= 0")
    return asyncio.run(crawl(args))


if __name__ == "__main__":
    sys.exit(main())
