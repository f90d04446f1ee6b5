#!/usr/bin/env python3
"""asyncio_opens.py -- N concurrent asyncio.open_connection + one HTTP/1.0 GET each.

Usage: asyncio_opens.py PORT N [--semaphore K] [--probe FREE_PORT]
With --semaphore K, at most K are open at once (an asyncio.Semaphore held
from before the open until the connection is closed). Prints one line:
"ok K failed F codes ERRNO=n,... elapsed_ms E slowest_ms S".
With --probe, a timer ticks every 50 ms for the whole run, and 500 ms in one
more GET goes to 127.0.0.1:FREE_PORT (an uncapped upstream); stderr gets
"probe free_ms F pending P ticks K maxgap_ms G": that GET's time (-1: it
failed), how many of the N were pending when it started, the timer's ticks
and its longest gap between two ticks.
"""
import argparse, asyncio, errno, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("n", type=int)
ap.add_argument("--semaphore", type=int, default=0)
ap.add_argument("--probe", type=int, default=0)
a = ap.parse_args()
codes, res = {}, {"ok": 0, "failed": 0, "slowest": 0.0}


async def one(sem):
    t = time.monotonic()
    try:
        if sem:
            async with sem:
                await get(a.port)
        else:
            await get(a.port)
        res["ok"] += 1
    except OSError as e:
        res["failed"] += 1
        name = errno.errorcode.get(e.errno, type(e).__name__)
        codes[name] = codes.get(name, 0) + 1
    res["slowest"] = max(res["slowest"], time.monotonic() - t)


async def get(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(b"GET / HTTP/1.0\r\n\r\n")
        data = await r.read()
        if not data.startswith(b"HTTP/1.0 200"):
            raise OSError(errno.EPROTO, "bad reply")
    finally:
        w.close()
        await w.wait_closed()


async def ticker(stop, st):
    last = time.monotonic()
    while not stop.is_set():
        await asyncio.sleep(0.05)
        now = time.monotonic()
        st["ticks"] += 1
        st["gap"] = max(st["gap"], now - last)
        last = now


async def probe(st):
    await asyncio.sleep(0.5)
    st["pending"] = a.n - res["ok"] - res["failed"]
    t = time.monotonic()
    try:
        await asyncio.wait_for(get(a.probe), 10)
        st["free"] = (time.monotonic() - t) * 1000
    except (OSError, asyncio.TimeoutError):
        st["free"] = -1


async def main():
    sem = asyncio.Semaphore(a.semaphore) if a.semaphore else None
    st = {"ticks": 0, "gap": 0.0, "free": -1, "pending": 0}
    stop = asyncio.Event()
    side = [asyncio.ensure_future(ticker(stop, st)), asyncio.ensure_future(probe(st))] if a.probe else []
    t0 = time.monotonic()
    await asyncio.gather(*(one(sem) for _ in range(a.n)))
    elapsed = time.monotonic() - t0
    if side:
        await side[1]
        stop.set()
        await side[0]
        print("probe free_ms %d pending %d ticks %d maxgap_ms %d" % (
            st["free"], st["pending"], st["ticks"], st["gap"] * 1000), file=sys.stderr)
    c = ",".join("%s=%d" % kv for kv in sorted(codes.items())) or "-"
    print("ok %d failed %d codes %s elapsed_ms %d slowest_ms %d" % (
        res["ok"], res["failed"], c, elapsed * 1000, res["slowest"] * 1000))

asyncio.run(main())
