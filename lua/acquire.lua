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
-- KEYS[10] <prefix>{name}:epoch    string, no TTL: server ms from which new
--                                  grants are allowed (restart grace, below)
-- ARGV[11] restart grace in ms (0: off): when KEYS[10] is missing -- Redis
--          never saw this semaphore, or lost its data (a restart without
--          persistence, a flush) -- it is set to now + grace, and until then
--          only holders asking again keep permits: the holders of before the
--          loss re-register with their next heartbeat (renew.lua) meanwhile,
--          so the fleet never counts from zero. Optional (KEYS[10] absent).
-- Wake lists <prefix>{name}:wake:<holder id> (a list of at most one token) are
-- derived from KEYS[7]; they share its hash tag, so its cluster slot.
-- With these keys the reply has two more elements: retry_ms (> 0: admitted by
-- the limit and the queue, but the rate or the restart grace says not yet:
-- the next slot is in that many ms) and wake_ms (ms until the earliest lease ends, when a waiter must
-- re-check even if nobody wakes it; -1: none).
-- -- end wait --
-- Returns {granted (0/1), count after the call, limit in force}.
--
-- Time is the server's (TIME), never the client's. Expired holders (score <=
-- now) are dropped first, so a crashed holder's permit comes back after its
-- lease whatever other holders do. The holders key's TTL is at least the
-- longest remaining lease: a grant that finds less than its own lease left
-- on it (or a new key) sets it to (latest lease expiry - now) + lease, so it
-- never expires while a lease is live, and an idle semaphore (nobody
-- renewing) vanishes at most one lease (the longest in use) after its last
-- lease ended; in between, grants leave it alone (it covers their lease
-- already: so did the grant or renew.lua that set it). The since
-- hash always has the same TTL (both are set together, here and in
-- renew.lua), so one PTTL of since tells both, and a since hash this call
-- made anew (its TTL -1) gets one at once. Releasing the last holder
-- deletes the key at once.
--
-- Cost: on the fast path (a free permit, empty queue, no rate, no audit, a
-- caller that never waited) this is 13 redis.call: TIME, the sweep's read,
-- ZCARD, GET limit, ZCARD queue, ZADD, HSET since, PTTL since, 3 HINCRBY,
-- HSET limit, HDEL full_since (a lone holder: two PEXPIRE for the PTTL).
-- The rest runs only when there is work to do. Arguments are strings where
-- they can be (a number costs a %.17g each), and the counters stay HINCRBY:
-- one HMGET + one HSET of them costs more than the three HINCRBY.
if redis.replicate_commands then redis.replicate_commands() end

local holders, limkey = KEYS[1], KEYS[2]
local holder = ARGV[1]
local lease = tonumber(ARGV[2])
if not lease or lease <= 0 then
    return redis.error_reply('ERR conncap acquire: lease_ms must be > 0')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s = string.format('%d', now) -- numbers given to redis.call cost a %.17g each
local expiry = string.format('%d', now + lease)
local wait_ms, wait_s = 0, '0' -- stats: ms waited so far
if ARGV[4] and ARGV[4] ~= '0' then
    wait_ms = math.max(0, math.floor(tonumber(ARGV[4]) or 0))
    wait_s = string.format('%d', wait_ms)
end

-- the holders the sweep drops (their lease ended): usually none, so one read
local swept = redis.call('ZRANGEBYSCORE', holders, '-inf', now_s)
local n_swept = #swept
if n_swept > 0 then redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_s) end
local count = redis.call('ZCARD', holders) -- kept up to date from here on, not read again

local limit = tonumber(redis.call('GET', limkey)) or tonumber(ARGV[3]) or 0

-- wait: fair queue and rate limit (issue 6) --
-- Fairness is the "fair semaphore" of Redis in Action 6.3.2 (and of the
-- redis-semaphore package's fair variant) turned into a queue: waiters hold
-- tickets ordered by arrival, and a permit freed while the queue is not empty
-- goes to the first (limit - count) live tickets only; a newcomer lines up
-- behind them. Rate: GCRA (the generic cell rate algorithm, as in
-- redis-cell), with server time: one permit every 1/rate s, up to burst at once.
-- An empty queue has no tickets, dead or alive, and nobody to wake: its
-- ZCARD is all the queue work then (queue and qexp hold the same members,
-- added and removed together, with the same TTL).
local wq
if KEYS[7] then
    -- (every field named here: a table that grows later is rebuilt)
    wq = { queue = KEYS[7], qexp = KEYS[8], rkey = KEYS[9], flags = ARGV[8] or '',
           rate = tonumber(ARGV[9]) or 0, retry = 0, hint = -1, changed = n_swept > 0,
           queued = false, pos = 0, len = redis.call('ZCARD', KEYS[7]),
           base = string.sub(KEYS[7], 1, -6) .. 'wake:' }
    if wq.len > 0 then
        -- tickets not refreshed in time: their waiters are gone
        local dead = redis.call('ZRANGEBYSCORE', wq.qexp, '-inf', now_s, 'LIMIT', 0, 100)
        for _, d in ipairs(dead) do
            wq.len = wq.len - redis.call('ZREM', wq.queue, d)
            redis.call('ZREM', wq.qexp, d)
            redis.call('DEL', wq.base .. d)
        end
        wq.changed = wq.changed or #dead > 0
        local rank = redis.call('ZRANK', wq.queue, holder)
        wq.queued = rank ~= nil
        wq.pos = rank or wq.len
    end
end
-- server time in us, for the rate and the queue's arrival order
local function now_us() return tonumber(t[1]) * 1000000 + tonumber(t[2]) end
-- FREE (> 0) permits are free: may HOLDER take one now? Consumes a rate slot if so.
local function wait_admit(free)
    if not wq then return true end
    if wq.pos >= free then return false end
    if wq.rate > 0 then
        local T, burst, us = 1000000 / wq.rate, math.max(tonumber(ARGV[10]) or 1, 1), now_us()
        local tat = math.max(tonumber(redis.call('GET', wq.rkey)) or 0, us)
        local early = tat - T * (burst - 1) - us
        if early > 0 then
            -- the waiters ahead of HOLDER take the slots before its own
            wq.retry = math.ceil((early + wq.pos * T) / 1000)
            return false
        end
        local ntat = tat + T
        redis.call('SET', wq.rkey, string.format('%.3f', ntat), 'PX',
                   string.format('%d', math.ceil((ntat - us) / 1000) + 1))
    end
    return true
end
-- end wait --

-- restart grace (opt-in): ms left before new grants, 0 when none
local grace = 0
if KEYS[10] and ARGV[11] and ARGV[11] ~= '0' then
    local opens = tonumber(redis.call('GET', KEYS[10]))
    if not opens then
        opens = now + (tonumber(ARGV[11]) or 0)
        redis.call('SET', KEYS[10], string.format('%d', opens))
    end
    if opens > now then grace = opens - now end
end

-- A free permit that neither the queue nor the rate holds back: one ZADD
-- both admits HOLDER and tells whether it held a permit already (0 added).
-- Otherwise a holder asking again keeps its permit (its lease renewed)
-- whatever the queue and the rate say, as before.
local granted, was_holder = 0, false
if grace == 0 and count < limit and (not wq or (wq.rate <= 0 and wq.pos < limit - count)) then
    was_holder = redis.call('ZADD', holders, expiry, holder) == 0
    granted = 1
elseif redis.call('ZSCORE', holders, holder) then
    redis.call('ZADD', holders, expiry, holder)
    was_holder, granted = true, 1
elseif grace == 0 and count < limit and wait_admit(limit - count) then
    redis.call('ZADD', holders, expiry, holder)
    granted = 1
elseif grace > 0 and wq then
    wq.retry = math.max(wq.retry, grace) -- a waiter tries again when the grace ends
end
local fresh = granted == 1 and not was_holder -- a new grant
if fresh then count = count + 1 end

-- stats: acquire times (the since hash) --
local since = KEYS[4]
for i = 1, n_swept, 1000 do
    redis.call('HDEL', since, unpack(swept, i, math.min(i + 999, n_swept)))
end
if fresh then redis.call('HSET', since, holder, now_s) end
-- end stats --
-- TTL of the holders key (and of since, which always has the same TTL: both
-- are set together, here and in renew.lua). A grant needs the key to outlive
-- its lease; when less than one lease is left (or the key, or since, is new
-- or lost its TTL), both get (latest expiry - now) + lease. Otherwise the TTL
-- already covers this lease and, by this same rule, every other live one.
if granted == 1 then
    local pttl = -1
    if count > 1 or was_holder then pttl = redis.call('PTTL', since) end
    if pttl < lease then
        local ttl = lease + lease -- HOLDER alone: its expiry is the latest
        if count > 1 then
            local top = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
            ttl = tonumber(top[2]) - now + lease -- >= 2 leases: HOLDER's is in it
        end
        ttl = string.format('%d', ttl)
        redis.call('PEXPIRE', holders, ttl)
        redis.call('PEXPIRE', since, ttl)
    end
end
-- stats: counters, wait histogram, waiters, audit --
-- The stats hash has no TTL: its counters are monotonic (Prometheus
-- counters), so it outlives idle periods. since and waiters live as long as
-- the holders key / the longest wait; both stay O(1) per call when nothing
-- expired (the sweep reads only expired members).
do
    local stats, waiters, audit = KEYS[3], KEYS[5], KEYS[6]
    if n_swept > 0 then redis.call('HINCRBY', stats, 'reclaimed', n_swept) end
    local ev
    if fresh then
        local bucket = 'wait_le_1'
        if wait_ms > 1 then
            bucket = 'wait_le_inf'
            for _, b in ipairs({5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}) do
                if wait_ms <= b then bucket = 'wait_le_' .. b break end
            end
        end
        redis.call('HINCRBY', stats, 'acquired', '1')
        redis.call('HINCRBY', stats, bucket, '1')
        -- wait_sum_ms exists with wait_count (both made by the first grant or
        -- timeout): adding 0 to it is needed only then
        if redis.call('HINCRBY', stats, 'wait_count', '1') == 1 or wait_ms > 0 then
            redis.call('HINCRBY', stats, 'wait_sum_ms', wait_s)
        end
        ev = 'acquire'
    elseif granted == 0 then
        redis.call('HINCRBY', stats, 'denied', '1')
    end
    redis.call('HSET', stats, 'limit', limit)
    if count >= limit then
        redis.call('HSETNX', stats, 'full_since', now_s)
    else
        redis.call('HDEL', stats, 'full_since')
    end
    -- waiters: only a caller that was refused (or may have been: it waited,
    -- or holds or held a ticket) is or was listed there
    if granted == 0 or wait_ms > 0 or not wq or wq.queued or wq.flags ~= '' then
        local wait_left = math.max(0, math.floor(tonumber(ARGV[5]) or 0))
        if fresh then
            redis.call('ZREM', waiters, holder)
        elseif granted == 0 and wait_left > 0 then
            redis.call('ZADD', waiters, string.format('%d', now + wait_left + 1000), holder)
        end
        redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now_s)
        local wtop = redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')
        if wtop[2] then
            redis.call('PEXPIRE', waiters, string.format('%d', tonumber(wtop[2]) - now + 1))
        end
    end
    local audit_max = ARGV[6] == '0' and 0 or math.floor(tonumber(ARGV[6]) or 0)
    if ev and audit_max > 0 then
        redis.call('XADD', audit, 'MAXLEN', '~', audit_max, '*', 'event', ev, 'holder', holder,
                   'wait_ms', wait_ms, 'count', count, 'limit', limit)
    end
end
-- end stats --
-- wait: queue bookkeeping, wake-ups (issue 6) --
if wq then
    local flags = wq.flags
    local leave = flags ~= '' and string.find(flags, 'l', 1, true)
    local ttl = granted == 0 and (tonumber(ARGV[7]) or 0) or 0
    if granted == 1 or ttl <= 0 or leave then
        if wq.queued then
            redis.call('ZREM', wq.queue, holder)
            redis.call('ZREM', wq.qexp, holder)
            wq.changed = true
        end
        -- a caller that never held a ticket nor waited has no wake list
        if wq.queued or flags ~= '' or wait_ms > 0 then redis.call('DEL', wq.base .. holder) end
    else
        wq.len = wq.len + redis.call('ZADD', wq.queue, 'NX', string.format('%d', now_us()), holder)
        redis.call('ZADD', wq.qexp, string.format('%d', now + ttl), holder)
        for _, k in ipairs({ wq.queue, wq.qexp }) do
            if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, string.format('%d', ttl)) end
        end
        if wq.retry == 0 and count > 0 then
            local first = redis.call('ZRANGE', holders, 0, 0, 'WITHSCORES')
            wq.hint = math.max(0, tonumber(first[2]) - now)
        end
    end
    -- permits freed by lease expiry, or queue places freed: the first
    -- (limit - count) waiters may now go; wake them (each list holds one token)
    local free = limit - count
    if wq.changed and free > 0 and wq.len > 0 then
        for _, w in ipairs(redis.call('ZRANGE', wq.queue, 0, free - 1)) do
            if w ~= holder then
                local e = tonumber(redis.call('ZSCORE', wq.qexp, w)) or (now + 1000)
                redis.call('LPUSH', wq.base .. w, 'w')
                redis.call('LTRIM', wq.base .. w, 0, 0)
                redis.call('PEXPIRE', wq.base .. w, string.format('%d', math.max(1, e - now)))
            end
        end
    end
    if flags ~= '' and string.find(flags, 'u', 1, true) then
        local mykey = wq.base .. holder
        redis.call('LPUSH', mykey, 'u')
        redis.call('LTRIM', mykey, 0, 0)
        redis.call('PEXPIRE', mykey, string.format('%d', math.max(tonumber(ARGV[7]) or 0, 1000)))
    end
    return {granted, count, limit, wq.retry, wq.hint}
end
-- end wait --
return {granted, count, limit}
