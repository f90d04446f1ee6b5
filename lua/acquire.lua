-- acquire.lua -- admits a holder to a leased counting semaphore if below the limit.
--
-- KEYS[1]  <prefix>{name}:holders  sorted set: member holder id, score lease
--                                  expiry in ms of Redis server TIME
-- KEYS[2]  <prefix>{name}:limit    optional runtime override of the limit. It is
--                                  ops state written by `conncap set-limit` and
--                                  deliberately has no TTL: it stays until DEL.
-- ARGV[1]  holder id
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  configured limit (used when the limit key is absent or not a number)
-- stats (ops, issue 7): keys and args appended after the above --
-- KEYS[3]  <prefix>{name}:stats    hash of counters, no TTL (see below)
-- KEYS[4]  <prefix>{name}:since    hash: holder id -> acquire time (ms, TIME)
-- KEYS[5]  <prefix>{name}:waiters  sorted set: holder id -> when its wait ends
-- KEYS[6]  <prefix>{name}:audit    stream of events (only when ARGV[6] > 0)
-- ARGV[4]  ms this acquirer has waited so far (client clock), for the histogram
-- ARGV[5]  ms until this acquirer gives up (0: it will not wait), for waiters
-- ARGV[6]  audit stream MAXLEN ~ (0: no audit)
-- -- end stats --
-- wait (fair queue, wake-ups, rate limit; issue 6): appended after the above --
-- KEYS[7]  <prefix>{name}:queue    sorted set: waiting holder id -> arrival
--                                  (us of TIME); the FIFO order of waiters
-- KEYS[8]  <prefix>{name}:qexp     sorted set: waiting holder id -> ticket
--                                  expiry (ms): a waiter that stops re-checking
--                                  (crashed) drops out of the queue then
-- KEYS[9]  <prefix>{name}:rate     string: GCRA theoretical arrival time (us)
-- ARGV[7]  ticket TTL in ms: > 0 queues HOLDER when not admitted (or refreshes
--          its ticket); 0 tries once without queueing
-- ARGV[8]  flags: "u" push a token to HOLDER's own wake list (ends its pending
--          BLPOP on another connection); "l" leave the queue if not admitted
-- ARGV[9]  rate: new permits per second over the fleet (0: no rate limit)
-- ARGV[10] burst (>= 1): permits the rate lets through at once
-- Wake lists <prefix>{name}:wake:<holder id> (a list of at most one token) are
-- derived from KEYS[7]; they share its hash tag, so its cluster slot.
-- With these keys the reply has two more elements: retry_ms (> 0: admitted by
-- the limit and the queue, but the rate says not yet: the next slot is in that
-- many ms) and wake_ms (ms until the earliest lease ends, when a waiter must
-- re-check even if nobody wakes it; -1: none).
-- -- end wait --
-- Returns {granted (0/1), count after the call, limit in force}.
--
-- Time is the server's (TIME), never the client's. Expired holders (score <=
-- now) are dropped first, so a crashed holder's permit comes back after its
-- lease whatever other holders do. The holders key gets a TTL of (latest lease
-- expiry - now) + lease: it never expires while a lease is live, and an idle
-- semaphore (nobody renewing) vanishes at most one lease after its last lease
-- ended. Releasing the last holder deletes the key at once.
if redis.replicate_commands then redis.replicate_commands() end

local holders, limkey = KEYS[1], KEYS[2]
local holder = ARGV[1]
local lease = tonumber(ARGV[2])
if not lease or lease <= 0 then
    return redis.error_reply('ERR conncap acquire: lease_ms must be > 0')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + lease)

-- stats: the holders the sweep below drops (their lease ended) --
local swept = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
-- end stats --
local n_swept = redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
local was_holder = redis.call('ZSCORE', holders, holder) -- stats

local limit = tonumber(redis.call('GET', limkey)) or tonumber(ARGV[3]) or 0

-- wait: fair queue and rate limit (issue 6) --
-- Fairness is the "fair semaphore" of Redis in Action 6.3.2 (and of the
-- redis-semaphore package's fair variant) turned into a queue: waiters hold
-- tickets ordered by arrival, and a permit freed while the queue is not empty
-- goes to the first (limit - count) live tickets only; a newcomer lines up
-- behind them. Rate: GCRA (the generic cell rate algorithm, as in
-- redis-cell), with server time: one permit every 1/rate s, up to burst at once.
local wq
if KEYS[7] then
    wq = { queue = KEYS[7], qexp = KEYS[8], rkey = KEYS[9], ttl = tonumber(ARGV[7]) or 0,
           flags = ARGV[8] or '', rate = tonumber(ARGV[9]) or 0, burst = tonumber(ARGV[10]) or 1,
           retry = 0, hint = -1, now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) }
    wq.base = string.sub(wq.queue, 1, -6) .. 'wake:'
    if wq.burst < 1 then wq.burst = 1 end
    -- tickets not refreshed in time: their waiters are gone
    local dead = redis.call('ZRANGEBYSCORE', wq.qexp, '-inf', now, 'LIMIT', 0, 100)
    for _, d in ipairs(dead) do
        redis.call('ZREM', wq.queue, d)
        redis.call('ZREM', wq.qexp, d)
        redis.call('DEL', wq.base .. d)
    end
    wq.changed = n_swept > 0 or #dead > 0
    local rank = redis.call('ZRANK', wq.queue, holder)
    wq.queued = rank ~= nil
    wq.pos = rank or redis.call('ZCARD', wq.queue)
end
-- FREE (> 0) permits are free: may HOLDER take one now? Consumes a rate slot if so.
local function wait_admit(free)
    if not wq then return true end
    if wq.pos >= free then return false end
    if wq.rate > 0 then
        local T = 1000000 / wq.rate
        local tat = math.max(tonumber(redis.call('GET', wq.rkey)) or 0, wq.now_us)
        local early = tat - T * (wq.burst - 1) - wq.now_us
        if early > 0 then
            -- the waiters ahead of HOLDER take the slots before its own
            wq.retry = math.ceil((early + wq.pos * T) / 1000)
            return false
        end
        local ntat = tat + T
        redis.call('SET', wq.rkey, string.format('%.3f', ntat), 'PX',
                   string.format('%d', math.ceil((ntat - wq.now_us) / 1000) + 1))
    end
    return true
end
-- end wait --

local granted = 0
if redis.call('ZSCORE', holders, holder) then
    redis.call('ZADD', holders, expiry, holder)
    granted = 1
elseif redis.call('ZCARD', holders) < limit and wait_admit(limit - redis.call('ZCARD', holders)) then
    redis.call('ZADD', holders, expiry, holder)
    granted = 1
end

local count = redis.call('ZCARD', holders)
if count > 0 then
    local top = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
    local ttl = tonumber(top[2]) - now + lease
    if ttl < lease then ttl = lease end
    redis.call('PEXPIRE', holders, string.format('%d', ttl))
end
-- stats: counters, wait histogram, acquire times, waiters, audit --
-- The stats hash has no TTL: its counters are monotonic (Prometheus
-- counters), so it outlives idle periods. since and waiters live as long as
-- the holders key / the longest wait; both stay O(1) per call when nothing
-- expired (the sweep reads only expired members).
do
    local stats, since, waiters, audit = KEYS[3], KEYS[4], KEYS[5], KEYS[6]
    local wait_ms = math.max(0, math.floor(tonumber(ARGV[4]) or 0))
    local wait_left = math.max(0, math.floor(tonumber(ARGV[5]) or 0))
    local audit_max = math.floor(tonumber(ARGV[6]) or 0)
    if #swept > 0 then
        redis.call('HINCRBY', stats, 'reclaimed', #swept)
        for i = 1, #swept, 1000 do
            redis.call('HDEL', since, unpack(swept, i, math.min(i + 999, #swept)))
        end
    end
    local ev
    if granted == 1 and not was_holder then
        local bounds = {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
        local bucket = 'wait_le_inf'
        for _, b in ipairs(bounds) do
            if wait_ms <= b then bucket = 'wait_le_' .. b break end
        end
        redis.call('HINCRBY', stats, 'acquired', 1)
        redis.call('HINCRBY', stats, bucket, 1)
        redis.call('HINCRBY', stats, 'wait_count', 1)
        redis.call('HINCRBY', stats, 'wait_sum_ms', wait_ms)
        redis.call('HSET', since, holder, string.format('%d', now))
        redis.call('ZREM', waiters, holder)
        ev = 'acquire'
    elseif granted == 0 then
        redis.call('HINCRBY', stats, 'denied', 1)
        if wait_left > 0 then
            redis.call('ZADD', waiters, string.format('%d', now + wait_left + 1000), holder)
        end
    end
    redis.call('HSET', stats, 'limit', limit)
    if count >= limit then
        redis.call('HSETNX', stats, 'full_since', string.format('%d', now))
    else
        redis.call('HDEL', stats, 'full_since')
    end
    redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now)
    local wtop = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
    if wtop[2] then
        redis.call('PEXPIRE', waiters, string.format('%d', tonumber(wtop[2]) - now + 1))
    end
    local pttl = redis.call('PTTL', holders)
    if pttl > 0 then redis.call('PEXPIRE', since, pttl) end
    if ev and audit_max > 0 then
        redis.call('XADD', audit, 'MAXLEN', '~', audit_max, '*', 'event', ev, 'holder', holder,
                   'wait_ms', wait_ms, 'count', count, 'limit', limit)
    end
end
-- end stats --
-- wait: queue bookkeeping, wake-ups (issue 6) --
if wq then
    local mykey = wq.base .. holder
    if granted == 1 or wq.ttl <= 0 or string.find(wq.flags, 'l', 1, true) then
        if wq.queued then
            redis.call('ZREM', wq.queue, holder)
            redis.call('ZREM', wq.qexp, holder)
            wq.changed = true
        end
        redis.call('DEL', mykey)
    else
        redis.call('ZADD', wq.queue, 'NX', string.format('%d', wq.now_us), holder)
        redis.call('ZADD', wq.qexp, string.format('%d', now + wq.ttl), holder)
        for _, k in ipairs({ wq.queue, wq.qexp }) do
            if redis.call('PTTL', k) < wq.ttl then redis.call('PEXPIRE', k, string.format('%d', wq.ttl)) end
        end
        if wq.retry == 0 and count > 0 then
            local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
            wq.hint = math.max(0, tonumber(first[2]) - now)
        end
    end
    -- permits freed by lease expiry, or queue places freed: the first
    -- (limit - count) waiters may now go; wake them (each list holds one token)
    local free = limit - count
    if wq.changed and free > 0 then
        for _, w in ipairs(redis.call('ZRANGE', wq.queue, 0, free - 1)) do
            if w ~= holder then
                local e = tonumber(redis.call('ZSCORE', wq.qexp, w)) or (now + 1000)
                redis.call('LPUSH', wq.base .. w, 'w')
                redis.call('LTRIM', wq.base .. w, 0, 0)
                redis.call('PEXPIRE', wq.base .. w, string.format('%d', math.max(1, e - now)))
            end
        end
    end
    if string.find(wq.flags, 'u', 1, true) then
        redis.call('LPUSH', mykey, 'u')
        redis.call('LTRIM', mykey, 0, 0)
        redis.call('PEXPIRE', mykey, string.format('%d', math.max(wq.ttl, 1000)))
    end
    return {granted, count, limit, wq.retry, wq.hint}
end
-- end wait --
return {granted, count, limit}
