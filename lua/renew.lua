-- renew.lua -- extends the leases of a batch of holders in one call.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- KEYS[2]  <prefix>{name}:stats    KEYS[3] <prefix>{name}:since  (see acquire.lua)
-- ARGV[1]  lease in ms (> 0)
-- ARGV[2]  add_missing: 1 to add missing holders again (even above the limit:
--          they hold live connections that Redis forgot, e.g. after a restart
--          or failover), 0 to only count them
-- ARGV[3..] holder ids (the caller sends bounded batches: sem.c's
--          CCAP_SEM_RENEW_BATCH)
-- Counts re-added holders (reregistered) and swept ones (reclaimed); a
-- holder re-added, or renewed after its lease ended, deletes full_since.
-- Returns the number of holders that were missing from the set.
--
-- Present holders get expiry now + lease (server TIME); that includes one
-- whose lease ran out but was not swept yet (nobody was admitted in its
-- place). One ZMSCORE tells which are present and one ZADD sets them all:
-- a fixed number of calls per batch. Acquire times: a grant writes none (a
-- holder never renewed was granted at its score - lease); so the first
-- renewal of a holder writes it to since, as its score - lease before this
-- call (now for a holder re-added because Redis lost it), one HMGET and at
-- most one HSET per batch. Then at most SWEEP other holders whose lease has
-- ended are dropped (as in acquire.lua: the next calls drop the rest). The
-- key's TTL is then set to (latest expiry - now) + lease, as in
-- acquire.lua, and since gets the very same TTL. During a failover window
-- (failover.lua) the new leases are what tells a holder re-registered from
-- one nobody holds any more: nothing else to do here.

local holders, stats, since = KEYS[1], KEYS[2], KEYS[3]
local lease = tonumber(ARGV[1])
if not lease or lease <= 0 then
    return redis.error_reply('ERR conncap renew: lease_ms must be > 0')
end
local add_missing = ARGV[2] == '1'
local SWEEP, SWEEP_S = 50, '50' -- (a string for redis.call: a number costs it a %.17g)

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local now_s, expiry = string.format('%d', now), string.format('%d', now + lease)

local missing, n = 0, #ARGV - 2
if n > 0 then
    local scores = redis.call('ZMSCORE', holders, unpack(ARGV, 3))
    local zadd, back = { 'ZADD', holders }, false
    for i = 1, n do
        local id = ARGV[i + 2]
        if not scores[i] then missing = missing + 1 end
        -- a holder added again, or whose lease had ended, comes back
        -- without a grant: it may fill the semaphore again
        if (scores[i] and tonumber(scores[i]) <= now) or (not scores[i] and add_missing) then back = true end
        if scores[i] or add_missing then
            zadd[#zadd + 1] = expiry
            zadd[#zadd + 1] = id
        end
    end
    if #zadd > 2 then redis.call(unpack(zadd)) end
    -- acquire times of holders renewed for the first time, or re-added; an
    -- acquire time Redis still has stays
    local known, hset = redis.call('HMGET', since, unpack(ARGV, 3)), { 'HSET', since }
    for i = 1, n do
        if not known[i] and (scores[i] or add_missing) then
            hset[#hset + 1] = ARGV[i + 2]
            hset[#hset + 1] = scores[i] and string.format('%d', tonumber(scores[i]) - lease) or now_s
        end
    end
    if #hset > 2 then redis.call(unpack(hset)) end
    if add_missing and missing > 0 then redis.call('HINCRBY', stats, 'reregistered', missing) end
    -- full_since dates a fill by a grant (acquire.lua); a semaphore filled
    -- again by holders coming back was not full all that time: the next
    -- refusal or filling grant sets it anew
    if back then redis.call('HDEL', stats, 'full_since', 'full_limit') end
end

-- the holders whose lease ended, at most SWEEP of them; not a failover
-- window's marker (score 0, first: see acquire.lua), which is no holder
local swept = redis.call('ZRANGEBYSCORE', holders, '-inf', now_s, 'LIMIT', '0', SWEEP_S)
if #swept > 0 and swept[1] == '!failover' then table.remove(swept, 1) end
if #swept > 0 then
    redis.call('ZREM', holders, unpack(swept))
    redis.call('HDEL', since, unpack(swept))
    redis.call('HINCRBY', stats, 'reclaimed', #swept)
end

local top = redis.call('ZRANGE', holders, '-1', '-1', 'WITHSCORES')
if top[2] then
    local ttl = tonumber(top[2]) - now + lease
    if ttl < lease then ttl = lease end
    ttl = string.format('%d', ttl)
    redis.call('PEXPIRE', holders, ttl)
    redis.call('PEXPIRE', since, ttl)
end
return missing
