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
redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
local was_holder = redis.call('ZSCORE', holders, holder) -- stats

local limit = tonumber(redis.call('GET', limkey)) or tonumber(ARGV[3]) or 0

local granted = 0
if redis.call('ZSCORE', holders, holder) then
    redis.call('ZADD', holders, expiry, holder)
    granted = 1
elseif redis.call('ZCARD', holders) < limit then
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
return {granted, count, limit}
