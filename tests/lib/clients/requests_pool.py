#!/usr/bin/python3
"""requests_pool.py -- THREADS threads share one requests.Session and make N GETs.

Usage: /usr/bin/python3 requests_pool.py PORT N THREADS POOL [--block]
The Session's HTTPAdapter keeps POOL connections (pool_maxsize; with
--block, pool_block=True: a thread waits for a pooled connection instead of
opening one more). Requests carry a timeout, as real clients do (Python then
connects non-blocking). Prints one line:
"ok K failed F codes ERRNO=n,... elapsed_ms E slowest_ms S".
"""
import argparse, errno, threading, time
from concurrent.futures import ThreadPoolExecutor
import requests
from requests.adapters import HTTPAdapter

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("n", type=int)
ap.add_argument("threads", type=int)
ap.add_argument("pool", type=int)
ap.add_argument("--block", action="store_true")
a = ap.parse_args()
s = requests.Session()
s.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=a.pool, pool_block=a.block, max_retries=0))
lock = threading.Lock()
codes, res = {}, {"ok": 0, "failed": 0, "slowest": 0.0}


def errno_of(e):
    """The errno of the OSError somewhere in E's chain, by name."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno:
            return errno.errorcode.get(e.errno, str(e.errno))
        e = e.__cause__ or e.__context__ or (e.args[0] if e.args and isinstance(e.args[0], BaseException) else None)
        if e is not None and not isinstance(e, BaseException):
            e = getattr(e, "reason", None)
    return "unknown"


def one(_):
    t = time.monotonic()
    try:
        r = s.get("http://127.0.0.1:%d/" % a.port, timeout=(10, 10))
        good, name = r.status_code == 200 and r.text == "ok\n", "HTTP%d" % r.status_code
    except requests.RequestException as e:
        good, name = False, errno_of(e)
    with lock:
        res["ok" if good else "failed"] += 1
        if not good:
            codes[name] = codes.get(name, 0) + 1
        res["slowest"] = max(res["slowest"], time.monotonic() - t)


t0 = time.monotonic()
with ThreadPoolExecutor(a.threads) as ex:
    list(ex.map(one, range(a.n)))
s.close()
c = ",".join("%s=%d" % kv for kv in sorted(codes.items())) or "-"
print("ok %d failed %d codes %s elapsed_ms %d slowest_ms %d" % (
    res["ok"], res["failed"], c, (time.monotonic() - t0) * 1000, res["slowest"] * 1000))
