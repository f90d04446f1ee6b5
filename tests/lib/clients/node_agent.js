// node_agent.js -- N concurrent GETs through one keep-alive http.Agent.
// Usage: node node_agent.js PORT N MAX_SOCKETS
// Prints one line: "ok K failed F codes CODE=n,... elapsed_ms E slowest_ms S",
// where a failed request's CODE is its error's code (e.g. ECONNREFUSED).
'use strict';
const http = require('http');
const [port, n, maxSockets] = process.argv.slice(2).map(Number);
const agent = new http.Agent({ keepAlive: true, maxSockets });
const t0 = Date.now();
let ok = 0, failed = 0, done = 0, slowest = 0;
const codes = {};

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
        agent.destroy();
        const list = Object.entries(codes).map(([k, v]) => k + '=' + v).join(',') || '-';
        console.log(`ok ${ok} failed ${failed} codes ${list} elapsed_ms ${Date.now() - t0} slowest_ms ${slowest}`);
    }
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
