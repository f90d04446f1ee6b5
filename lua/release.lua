-- release.lua -- gives back exactly one holder's permit; idempotent.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- KEYS[2]  <prefix>{name}:stats    KEYS[3] <prefix>{name}:since
-- KEYS[4]  <prefix>{name}:audit    KEYS[5] <prefix>{name}:limit
-- KEYS[6]  <prefix>{name}:queue    KEYS[7] <prefix>{name}:qexp  (see acquire.lua)
-- ARGV[1]  holder id
-- ARGV[2]  configured limit (-1: unknown, wake one waiter per permit freed)
-- ARGV[3]  flags (default ''): "r" HOLDER was renewed at least once, so it
--          may have an acquire time in since (renew.lua) to delete
-- ARGV[4]  audit stream MAXLEN ~ (default 0: no audit)
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
-- full_since is left alone: readers show it only while the semaphore is
-- full, and the grant that fills it again sets it anew (acquire.lua).
--
-- Cost: on the fast path (a holder leaving, never renewed, empty queue, no
-- audit) this is 3 redis.call: ZREM, HINCRBY, ZCARD queue. An empty queue
-- has no ticket, dead or alive, and nobody to wake (queue and qexp hold the
-- same members, added and removed together); HOLDER is not in it, so it has
-- no wake list either (at most a spent token of its own, which expires by
-- itself).
local holders, holder = KEYS[1], ARGV[1]
local removed = redis.call('ZREM', holders, holder)
-- released counter, acquire time, audit --
if removed == 1 then
    redis.call('HINCRBY', KEYS[2], 'released', '1')
    if ARGV[3] and ARGV[3] ~= '' and string.find(ARGV[3], 'r', 1, true) then
        redis.call('HDEL', KEYS[3], holder)
    end
    local audit_max = math.floor(tonumber(ARGV[4]) or 0)
    if audit_max > 0 then
        -- (score > 0: not a failover window's marker, see acquire.lua)
        redis.call('XADD', KEYS[4], 'MAXLEN', '~', audit_max, '*', 'event', 'release', 'holder', holder,
                   'count', redis.call('ZCOUNT', holders, '(0', '+inf'))
    end
end
-- wake-ups: hand the freed permit to the first waiters --
local queue = KEYS[6]
local qlen0 = redis.call('ZCARD', queue)
if qlen0 > 0 then
    local qexp, wbase = KEYS[7], string.sub(KEYS[6], 1, -6) .. 'wake:'
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local left = redis.call('ZREM', queue, holder)
    redis.call('ZREM', qexp, holder)
    redis.call('DEL', wbase .. holder)
    local dead = redis.call('ZRANGEBYSCORE', qexp, '-inf', now, 'LIMIT', 0, 50)
    if #dead > 0 then
        local wake = {}
        for i, d in ipairs(dead) do wake[i] = wbase .. d end
        redis.call('ZREM', queue, unpack(dead))
        redis.call('ZREM', qexp, unpack(dead))
        redis.call('DEL', unpack(wake))
    end
    if removed + left + #dead > 0 then
        -- live holders only; the expired ones are swept by the next acquire
        local live = redis.call('ZCOUNT', holders, '(' .. now, '+inf')
        local limit = tonumber(redis.call('GET', KEYS[5])) or tonumber(ARGV[2]) or -1
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
                redis.call('LPUSH', wbase .. w, 'w')
                redis.call('LTRIM', wbase .. w, 0, 0)
                redis.call('PEXPIRE', wbase .. w, string.format('%d', math.max(1, e - now)))
            end
        end
    end
end
return removed
