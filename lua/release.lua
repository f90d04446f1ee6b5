-- release.lua -- gives back exactly one holder's permit; idempotent.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- KEYS[2]  <prefix>{name}:stats    KEYS[3] <prefix>{name}:since
-- KEYS[4]  <prefix>{name}:audit    KEYS[5] <prefix>{name}:limit
-- KEYS[6]  <prefix>{name}:queue    KEYS[7] <prefix>{name}:qexp  (see acquire.lua)
-- ARGV[1]  holder id
-- ARGV[2]  audit stream MAXLEN ~ (0: no audit)
-- ARGV[3]  configured limit (-1: unknown, wake one waiter per permit freed)
-- Takes HOLDER out of the queue too (a waiter giving up), then wakes at most
-- as many waiters as this call freed permits or queue places, from the
-- head of the queue (acquire.lua says why), by pushing a token to their
-- wake lists.
-- Returns 1 if the holder was removed, 0 if it held no permit.
--
-- Only this member is removed, never another holder. The TTL invariant (the
-- key's TTL is at least the longest remaining lease) holds after a removal
-- without touching the TTL: removing a member cannot raise the latest expiry.
-- Removing the last member deletes the key (Redis drops empty sorted sets).
--
-- Cost: on the fast path (a holder leaving, full_since not set, empty
-- queue, no audit) this is 5 redis.call: ZREM, HINCRBY, HDEL since, HGET
-- full_since, ZCARD queue. An empty queue has no ticket, dead
-- or alive, and nobody to wake (queue and qexp hold the same members, added
-- and removed together); HOLDER is not in it, so it has no wake list either
-- (at most a spent token of its own, which expires by itself).
if redis.replicate_commands then redis.replicate_commands() end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
-- released counter, acquire time, full_since, audit --
if removed == 1 then
    local stats = KEYS[2]
    redis.call('HINCRBY', stats, 'released', '1')
    redis.call('HDEL', KEYS[3], ARGV[1])
    -- full_since goes once the count is below the limit last recorded (it
    -- stays when set-limit lowered the limit under the holders). HGET, not
    -- HEXISTS: the scripts use only the commands examples/redis-acl.conf allows.
    local count
    if redis.call('HGET', stats, 'full_since') then
        local lim = tonumber(redis.call('HGET', stats, 'limit'))
        if lim then
            -- live holders: expired ones may wait to be swept (acquire.lua)
            local t = redis.call('TIME')
            count = redis.call('ZCOUNT', KEYS[1], '(' .. string.format('%d', t[1] * 1000 + math.floor(t[2] / 1000)), '+inf')
            if count < lim then redis.call('HDEL', stats, 'full_since') end
        end
    end
    local audit_max = ARGV[2] == '0' and 0 or math.floor(tonumber(ARGV[2]) or 0)
    if audit_max > 0 then
        redis.call('XADD', KEYS[4], 'MAXLEN', '~', audit_max, '*', 'event', 'release', 'holder', ARGV[1],
                   'count', count or redis.call('ZCARD', KEYS[1]))
    end
end
-- wake-ups: hand the freed permit to the first waiters --
local qlen0 = redis.call('ZCARD', KEYS[6])
if qlen0 > 0 then
    local holders, queue, qexp = KEYS[1], KEYS[6], KEYS[7]
    local base = string.sub(queue, 1, -6) .. 'wake:'
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local left = redis.call('ZREM', queue, ARGV[1])
    redis.call('ZREM', qexp, ARGV[1])
    redis.call('DEL', base .. ARGV[1])
    local dead = redis.call('ZRANGEBYSCORE', qexp, '-inf', now, 'LIMIT', 0, 100)
    if #dead > 0 then
        local wake = {}
        for i, d in ipairs(dead) do wake[i] = base .. d end
        redis.call('ZREM', queue, unpack(dead))
        redis.call('ZREM', qexp, unpack(dead))
        redis.call('DEL', unpack(wake))
    end
    if removed + left + #dead > 0 then
        -- live holders only; the expired ones are swept by the next acquire
        local live = redis.call('ZCOUNT', holders, '(' .. now, '+inf')
        local limit = tonumber(redis.call('GET', KEYS[5])) or tonumber(ARGV[3]) or -1
        local free = removed
        if limit >= 0 then free = limit - live end
        -- queue places freed let a waiter in only when the queue was longer
        -- than the free permits
        local freed = removed
        if free < qlen0 then freed = freed + left + #dead end
        local top = math.min(free, redis.call('ZCARD', queue))
        if freed > 0 and top > 0 then
            for _, w in ipairs(redis.call('ZRANGE', queue, 0, math.min(freed, top) - 1)) do
                local e = tonumber(redis.call('ZSCORE', qexp, w)) or (now + 1000)
                redis.call('LPUSH', base .. w, 'w')
                redis.call('LTRIM', base .. w, 0, 0)
                redis.call('PEXPIRE', base .. w, string.format('%d', math.max(1, e - now)))
            end
        end
    end
end
return removed
