// node_agent.js -- N concurrent GETs through one keep-alive http.Agent.
// Usage: node node_agent.js PORT N MAX_SOCKETS [FREE_PORT]
// Prints one line: "ok K failed F codes CODE=n,... elapsed_ms E slowest_ms S",
// where a failed request's CODE is its error's code (e.g. ECONNREFUSED).
// With FREE_PORT, a timer ticks every 50 ms for the whole run and 500 ms in one
// more GET goes to 127.0.0.1:FREE_PORT (an uncapped upstream, no agent); stderr
// gets "probe free_ms F pending P ticks K maxgap_ms G" (tests/lib/realclient.sh).
'use strict';
const http = require('http');
const [port, n, maxSockets, freePort] = process.argv.slice(2).map(Number);
const agent = new http.Agent({ keepAlive: true, maxSockets });
const t0 = Date.now();
let ok = 0, failed = 0, done = 0, slowest = 0, elapsed = 0;
const codes = {};
const probe = { free: -1, pending: 0, ticks: 0, gap: 0, done: !freePort };
let last = Date.now();
const tick = freePort ? setInterval(() => {
    const now = Date.now();
    probe.ticks++;
    probe.gap = Math.max(probe.gap, now - last);
    last = now;
}, 50) : null;

function report() {
    if (done !== n || !probe.done) return;
    if (tick) {
        clearInterval(tick);
        console.error(`probe free_ms ${probe.free} pending ${probe.pending} ticks ${probe.ticks} maxgap_ms ${probe.gap}`);
    }
    const list = Object.entries(codes).map(([k, v]) => k + '=' + v).join(',') || '-';
    console.log(`ok ${ok} failed ${failed} codes ${list} elapsed_ms ${elapsed} slowest_ms ${slowest}`);
}

function finish(started, err, status) {
    slowest = Math.max(slowest, Date.now() - started);
    if (err || status !== 200) {
        failed++;
        const c = err ? (err.code || err.message) : 'HTTP' + status;
        codes[c] = (codes[c] || 0) + 1;
    } else {
        ok++;
    }
    if (++done === n) {
        elapsed = Date.now() - t0;
        agent.destroy();
        report();
    }
}

if (freePort) {
    setTimeout(() => {
        probe.pending = n - done;
        const started = Date.now();
        let settled = false;
        const end = (good) => {
            if (settled) return;
            settled = true;
            probe.free = good ? Date.now() - started : -1;
            probe.done = true;
            report();
        };
        const req = http.get({ host: '127.0.0.1', port: freePort, path: '/', agent: false }, (res) => {
            res.resume();
            res.on('end', () => end(res.statusCode === 200));
            res.on('error', () => end(false));
        });
        req.setTimeout(10000, () => req.destroy(new Error('probe timeout')));
        req.on('error', () => end(false));
    }, 500);
}

for (let i = 0; i < n; i++) {
    const started = Date.now();
    let settled = false;
    const once = (err, status) => { if (!settled) { settled = true; finish(started, err, status); } };
    const req = http.get({ host: '127.0.0.1', port, path: '/', agent }, (res) => {
        res.resume();
        res.on('end', () => once(null, res.statusCode));
        res.on('error', (e) => once(e));
    });
    req.on('error', (e) => once(e));
}
