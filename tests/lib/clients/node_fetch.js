// node_fetch.js -- N concurrent fetch() GETs (node 18+'s built-in fetch, undici's pool).
// Usage: node node_fetch.js PORT N [FREE_PORT]
// Prints one line: "ok K failed F codes CODE=n,... elapsed_ms E slowest_ms S",
// where a failed request's CODE is its error's cause's code (e.g. ECONNREFUSED).
// With FREE_PORT, a timer ticks every 50 ms for the whole run and 500 ms in one
// more fetch goes to 127.0.0.1:FREE_PORT (an uncapped upstream); stderr gets
// "probe free_ms F pending P ticks K maxgap_ms G" (tests/lib/realclient.sh).
'use strict';
const [port, n, freePort] = process.argv.slice(2).map(Number);
const codes = {};
let ok = 0, failed = 0, slowest = 0;
const probe = { free: -1, pending: 0, ticks: 0, gap: 0 };

async function get(p) {
    const r = await fetch(`http://127.0.0.1:${p}/`, { signal: AbortSignal.timeout(30000) });
    const body = await r.text();
    if (r.status !== 200 || body !== 'ok\n') throw Object.assign(new Error('bad reply'), { code: 'HTTP' + r.status });
}

async function one() {
    const started = Date.now();
    try {
        await get(port);
        ok++;
    } catch (e) {
        failed++;
        const c = (e.cause && e.cause.code) || e.code || e.name;
        codes[c] = (codes[c] || 0) + 1;
    }
    slowest = Math.max(slowest, Date.now() - started);
}

async function side() {
    await new Promise((r) => setTimeout(r, 500));
    probe.pending = n - ok - failed;
    const started = Date.now();
    try {
        await get(freePort);
        probe.free = Date.now() - started;
    } catch (e) {
        probe.free = -1;
    }
}

(async () => {
    let last = Date.now();
    const tick = freePort ? setInterval(() => {
        const now = Date.now();
        probe.ticks++;
        probe.gap = Math.max(probe.gap, now - last);
        last = now;
    }, 50) : null;
    const t0 = Date.now();
    const s = freePort ? side() : null;
    await Promise.all(Array.from({ length: n }, one));
    const elapsed = Date.now() - t0;
    if (s) {
        await s;
        clearInterval(tick);
        console.error(`probe free_ms ${probe.free} pending ${probe.pending} ticks ${probe.ticks} maxgap_ms ${probe.gap}`);
    }
    const list = Object.entries(codes).map(([k, v]) => k + '=' + v).join(',') || '-';
    console.log(`ok ${ok} failed ${failed} codes ${list} elapsed_ms ${elapsed} slowest_ms ${slowest}`);
    process.exit(0);
})();
