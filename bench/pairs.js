// pairs.js -- acquire/release pairs per second of the npm package redis-semaphore (bench/run.sh's comparison row).
// Usage: node pairs.js SOCK NPROC SECONDS LIMIT -- NPROC processes (this script again), each with its
// own ioredis connection to the Redis at Unix socket SOCK, loop acquire + release of one
// redis-semaphore Semaphore of LIMIT for SECONDS; prints the total pairs/s.
'use strict';
const { spawn } = require('child_process');
const [sock, nproc, secs, limit, role] = process.argv.slice(2);

async function child() {
  const Redis = require('ioredis');
  const { Semaphore } = require('redis-semaphore');
  const client = new Redis({ path: sock });
  const end = Date.now() + Number(secs) * 1000;
  let n = 0;
  while (Date.now() < end) {
    const s = new Semaphore(client, 'bench-npm', Number(limit), { acquireTimeout: 10000, retryInterval: 1 });
    await s.acquire();
    await s.release();
    n++;
  }
  process.stdout.write(n + '\n');
  client.disconnect();
}

function parent() {
  let total = 0, left = Number(nproc), failed = false;
  for (let i = 0; i < Number(nproc); i++) {
    const c = spawn(process.execPath, [__filename, sock, nproc, secs, limit, '--child'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    c.stdout.on('data', (d) => { out += d; });
    c.on('exit', (code) => {
      failed = failed || code !== 0;
      total += Number(out.trim()) || 0;
      if (--left === 0) {
        process.stdout.write(Math.round(total / Number(secs)) + '\n');
        process.exit(failed ? 1 : 0);
      }
    });
  }
}

if (role === '--child') child().catch((e) => { console.error(e); process.exit(1); });
else parent();
