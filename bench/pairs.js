// pairs.js -- acquire/release pairs of the npm package redis-semaphore (bench/run.sh's comparison rows).
// Usage: node pairs.js SOCK NPROC SECONDS LIMIT -- NPROC processes (this script again), each with its
// own ioredis connection to the Redis at Unix socket SOCK, loop acquire + release of one
// redis-semaphore Semaphore of LIMIT for SECONDS; prints the total pairs/s.
//        node pairs.js conn SOCK NPROC N LIMIT PORT -- the shim's pattern (bench/shim_pairs.sh):
// NPROC processes each make N x (acquire, a TCP connect+close to 127.0.0.1:PORT, release) on
// Semaphore "bench-conn" of LIMIT (lockTimeout 30 s, the shim's lease); prints the pairs made.
'use strict';
const { spawn } = require('child_process');
const net = require('net');
const conn = process.argv[2] === 'conn';
const args = process.argv.slice(conn ? 3 : 2);
const [sock, nproc] = args;
const role = process.env.PAIRS_JS_CHILD;

function connectClose(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect({ port, host: '127.0.0.1' }, () => { s.destroy(); resolve(); });
    s.on('error', reject);
  });
}

async function child() {
  const Redis = require('ioredis');
  const { Semaphore } = require('redis-semaphore');
  const client = new Redis({ path: sock });
  let n = 0;
  if (conn) {
    const [, , count, limit, port] = args;
    for (let i = 0; i < Number(count); i++) {
      const s = new Semaphore(client, 'bench-conn', Number(limit),
        { lockTimeout: 30000, acquireTimeout: 10000, retryInterval: 1 });
      await s.acquire();
      await connectClose(Number(port));
      await s.release();
      n++;
    }
  } else {
    const [, , secs, limit] = args;
    const end = Date.now() + Number(secs) * 1000;
    while (Date.now() < end) {
      const s = new Semaphore(client, 'bench-npm', Number(limit), { acquireTimeout: 10000, retryInterval: 1 });
      await s.acquire();
      await s.release();
      n++;
    }
  }
  process.stdout.write(n + '\n');
  client.disconnect();
}

function parent() {
  let total = 0, left = Number(nproc), failed = false;
  for (let i = 0; i < Number(nproc); i++) {
    const c = spawn(process.execPath, process.argv.slice(1),
      { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, PAIRS_JS_CHILD: '1' } });
    let out = '';
    c.stdout.on('data', (d) => { out += d; });
    c.on('exit', (code) => {
      failed = failed || code !== 0;
      total += Number(out.trim()) || 0;
      if (--left === 0) {
        process.stdout.write((conn ? total : Math.round(total / Number(args[2]))) + '\n');
        process.exit(failed ? 1 : 0);
      }
    });
  }
}

if (role) child().catch((e) => { console.error(e); process.exit(1); });
else parent();
