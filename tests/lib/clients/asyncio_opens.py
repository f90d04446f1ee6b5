#!/usr/bin/env python3
"""asyncio_opens.py -- N concurrent asyncio.open_connection + one HTTP/1.0 GET each.

Usage: asyncio_opens.py PORT N [--semaphore K]
With --semaphore K, at most K are open at once (an asyncio.Semaphore held
from before the open until the connection is closed). Prints one line:
"ok K failed F codes ERRNO=n,... elapsed_ms E slowest_ms S".
"""
import argparse, asyncio, errno, time

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("n", type=int)
ap.add_argument("--semaphore", type=int, default=0)
a = ap.parse_args()
codes, res = {}, {"ok": 0, "failed": 0, "slowest": 0.0}


async def one(sem):
    t = time.monotonic()
    try:
        if sem:
            async with sem:
                await get()
        else:
            await get()
        res["ok"] += 1
    except OSError as e:
        res["failed"] += 1
        name = errno.errorcode.get(e.errno, type(e).__name__)
        codes[name] = codes.get(name, 0) + 1
    res["slowest"] = max(res["slowest"], time.monotonic() - t)


async def get():
    r, w = await asyncio.open_connection("127.0.0.1", a.port)
    try:
        w.write(b"GET / HTTP/1.0\r\n\r\n")
        data = await r.read()
        if not data.startswith(b"HTTP/1.0 200"):
            raise OSError(errno.EPROTO, "bad reply")
    finally:
        w.close()
        await w.wait_closed()


async def main():
    sem = asyncio.Semaphore(a.semaphore) if a.semaphore else None
    t0 = time.monotonic()
    await asyncio.gather(*(one(sem) for _ in range(a.n)))
    c = ",".join("%s=%d" % kv for kv in sorted(codes.items())) or "-"
    print("ok %d failed %d codes %s elapsed_ms %d slowest_ms %d" % (
        res["ok"], res["failed"], c, (time.monotonic() - t0) * 1000, res["slowest"] * 1000))

asyncio.run(main())
