-- release.lua -- gives back exactly one holder's permit; idempotent.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- KEYS[2]  <prefix>{name}:stats    KEYS[3] <prefix>{name}:queue
-- KEYS[4]  <prefix>{name}:limit    KEYS[5] <prefix>{name}:qexp  (see acquire.lua)
-- KEYS[6]  <prefix>{name}:waiters  KEYS[7] <prefix>{name}:epoch
-- KEYS[8]  <prefix>{name}:grant    (see acquire.lua; optional: with 7 keys
--                                  a release only wakes)
-- KEYS[9]  <prefix>{name}:since    KEYS[10] <prefix>{name}:audit: needed
--                                  only with flag "r" (since), and audit
--                                  (ARGV[4] > 0): sem.c sends KEYS[1..8] or
--                                  KEYS[1..9] without them (each key costs
--                                  Redis about 1k instructions a call)
-- The short call, KEYS[1..3] and ARGV[1] only (sem.c sends it for a holder
-- never renewed, without audit, while the process's last acquire of the
-- semaphore found no queue): the common release touches only those keys.
-- If it finds a queue after all, it names KEYS[4..8] from the queue key
-- (its name minus "queue", as the wake lists are named; core/keys.h) and
-- goes on as the full call with ARGV[2] -1 would.
-- ARGV[1]  holder id
-- ARGV[2]  configured limit (-1: unknown, wake one waiter per permit freed)
-- ARGV[3]  flags (default ''): "r" HOLDER was renewed at least once, so it
--          may have an acquire time in since (renew.lua) to delete
-- ARGV[4]  audit stream MAXLEN ~ (default 0: no audit)
-- Takes HOLDER out of the queue and out of the waiters set too (a waiter
-- giving up: a release of an id that held no permit), then wakes at most
-- as many waiters as this call freed permits or queue places, from the
-- head of the queue (acquire.lua says why), by pushing a token to their
-- wake lists: 'g' when this call granted that waiter its permit (below),
-- 'w' (re-check: acquire) otherwise.
-- Grants: a woken waiter whose ticket has an entry in the grant hash (it
-- said it takes grants, acquire.lua's flag "g") is admitted here, as its
-- own acquire would admit it: the live holders below the limit (the limit
-- key, else the limit it queued with), no restart grace running (epoch
-- key in the future), no failover window open (its marker in holders).
-- It becomes a holder with the lease it queued with, its ticket and entry
-- go, its grant counts as acquire.lua's would (acquired, the wait
-- histogram with the time since its ticket's arrival, waiters, audit), and
-- its token is 'g': its process connects without another acquire. A
-- waiter gone meanwhile keeps nothing for long: its process releases its
-- holder id when its wait ends (which removes the permit), and a process
-- gone loses it at its lease's end, as any holder. Waiters under a rate
-- never have an entry (they are only woken).
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
-- audit) this is 3 redis.call: ZREM, HINCRBY, ZCARD queue. A holder has no
-- entry in the waiters set (its grant removed it, acquire.lua or below); an
-- id that held no permit may have one (a waiter giving up: its wait ended
-- early, closed or cancelled), which goes now rather than at the end of
-- its wait (ZREM: one call more, on that path only). An empty queue
-- has no ticket, dead or alive, and nobody to wake (queue and qexp hold the
-- same members, added and removed together); HOLDER is not in it, so it has
-- no wake list either (at most a spent token of its own, which expires by
-- itself).
local holders, holder = KEYS[1], ARGV[1]
local removed = redis.call('ZREM', holders, holder)
-- a waiter giving up: its waiters entry; a holder: released counter, acquire time, audit --
if removed == 0 then
    -- a waiter giving up (see above); the short call names the key from the queue's (header)
    redis.call('ZREM', KEYS[6] or string.sub(KEYS[3], 1, -6) .. 'waiters', holder)
else
    redis.call('HINCRBY', KEYS[2], 'released', '1')
    if ARGV[3] and ARGV[3] ~= '' and string.find(ARGV[3], 'r', 1, true) then
        redis.call('HDEL', KEYS[9], holder)
    end
    local audit_max = ARGV[4] and math.floor(tonumber(ARGV[4]) or 0) or 0 -- (sem.c leaves out a 0)
    if audit_max > 0 then
        -- (score > 0: not a failover window's marker, see acquire.lua)
        redis.call('XADD', KEYS[10], 'MAXLEN', '~', audit_max, '*', 'event', 'release', 'holder', holder,
                   'count', redis.call('ZCOUNT', holders, '(0', '+inf'))
    end
end
-- wake-ups: hand the freed permit to the first waiters --
local queue = KEYS[3]
local qlen0 = redis.call('ZCARD', queue)
if qlen0 > 0 then
    local K = KEYS
    if not KEYS[4] then -- the short call (header)
        local base = string.sub(queue, 1, -6)
        K = {KEYS[1], KEYS[2], queue, base .. 'limit', base .. 'qexp', base .. 'waiters', base .. 'epoch',
             base .. 'grant'}
    end
    -- (made here: the empty queue's path builds no closure)
    -- Whether a release may grant now: no failover window open (its marker in
    -- HOLDERS: acquire.lua closes it) and no restart grace running (EPOCH_KEY
    -- in the future; missing: grace off, or Redis lost the data and with it
    -- the grant entries, which only a later acquire writes, and it sets the
    -- epoch).
    local function may_grant(holders, epoch_key, now)
        if redis.call('ZSCORE', holders, '!failover') then return false end
        local opens = epoch_key and tonumber(redis.call('GET', epoch_key))
        return not (opens and opens > now)
    end

    -- Admits queued waiter W (grant hash GRANTS) if it takes grants and the
    -- LIVE holders, with the places of the AHEAD waiters woken before it,
    -- are below its limit (LKEY, the limit key, else the one it queued
    -- with); see the header. T: the server's TIME. Returns its lease
    -- if so, else nil.
    local function grant(w, grants, lkey, live, ahead, now, t)
        local g = redis.call('HGET', grants, w)
        if not g then return nil end
        local lease, lim = string.match(g, '^(%d+) (%d+)$')
        lease, lim = tonumber(lease), lkey or tonumber(lim)
        if not lease or lease <= 0 or not lim or live + ahead >= lim then return nil end
        local arrival = tonumber(redis.call('ZSCORE', K[3], w)) or (now * 1000)
        local holders = K[1]
        redis.call('ZADD', holders, string.format('%d', now + lease), w)
        -- the holders key outlives every lease (acquire.lua's rule)
        if redis.call('PTTL', holders) < lease then
            local top = redis.call('ZRANGE', holders, '-1', '-1', 'WITHSCORES')
            redis.call('PEXPIRE', holders, string.format('%d', tonumber(top[2]) - now + lease))
        end
        redis.call('ZREM', K[3], w)
        redis.call('ZREM', K[5], w)
        redis.call('HDEL', grants, w)
        redis.call('ZREM', K[6], w)
        -- counted as acquire.lua counts a grant after a wait
        local wait_ms = math.max(0, math.floor((tonumber(t[1]) * 1000000 + tonumber(t[2]) - arrival) / 1000))
        local bucket = 'wait_le_inf'
        for _, b in ipairs({1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}) do
            if wait_ms <= b then bucket = 'wait_le_' .. b break end
        end
        local stats = K[2]
        redis.call('HINCRBY', stats, 'acquired', '1')
        redis.call('HINCRBY', stats, bucket, '1')
        redis.call('HINCRBY', stats, 'wait_count', '1')
        redis.call('HINCRBY', stats, 'wait_sum_ms', string.format('%d', wait_ms))
        local audit_max = math.floor(tonumber(ARGV[4]) or 0)
        if audit_max > 0 then
            redis.call('XADD', KEYS[10], 'MAXLEN', '~', audit_max, '*', 'event', 'acquire', 'holder', w,
                       'wait_ms', wait_ms, 'count', live + 1, 'limit', lim, 'by', 'release')
        end
        return lease
    end
    local qexp, wbase = K[5], string.sub(queue, 1, -6) .. 'wake:'
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local now_s = string.format('%d', now) -- (for redis.call: a number costs it a %.17g)
    -- HOLDER's ticket (a waiter giving up): not a leaving holder's, which
    -- has none (every grant takes the ticket out; at most a spent token of
    -- its own is left, expiring by itself), so not looked for then
    local left = 0
    if removed == 0 then left = redis.call('ZREM', queue, holder) end
    if left == 1 then
        redis.call('ZREM', qexp, holder)
        redis.call('DEL', wbase .. holder)
        if K[8] then redis.call('HDEL', K[8], holder) end
    end
    local dead = redis.call('ZRANGEBYSCORE', qexp, '-inf', now_s, 'LIMIT', '0', '50')
    local qlen = qlen0 - left -- (the queue's length from here on, without another ZCARD)
    if #dead > 0 then
        local wake = {}
        for i, d in ipairs(dead) do wake[i] = wbase .. d end
        qlen = qlen - redis.call('ZREM', queue, unpack(dead))
        redis.call('ZREM', qexp, unpack(dead))
        redis.call('DEL', unpack(wake))
        if K[8] then redis.call('HDEL', K[8], unpack(dead)) end
    end
    if removed + left + #dead > 0 then
        -- live holders only; the expired ones are swept by the next acquire
        local live = redis.call('ZCOUNT', holders, '(' .. now_s, '+inf')
        local lkey = tonumber(redis.call('GET', K[4]))
        local limit = lkey or tonumber(ARGV[2]) or -1
        local free = removed
        if limit >= 0 then free = limit - live end
        -- queue places freed let a waiter in only when the queue was longer
        -- than the free permits
        local freed = removed
        if free < qlen0 then freed = freed + left + #dead end
        local top = math.min(free, qlen)
        if freed > 0 and top > 0 then
            local grants = K[8]
            if grants then grants = may_grant(holders, K[7], now) and grants end
            -- AHEAD: waiters woken, not granted, ahead of the next one: their
            -- places are kept (the FIFO rule, as acquire.lua counts them)
            local ahead, granted = 0, 0
            local function wake(w, tok, ttl)
                -- (one token at most: a list that was empty holds it alone)
                if redis.call('LPUSH', wbase .. w, tok) > 1 then redis.call('LTRIM', wbase .. w, '0', '0') end
                redis.call('PEXPIRE', wbase .. w, string.format('%d', math.max(1, ttl)))
            end
            local function ticket_ttl(w) return (tonumber(redis.call('ZSCORE', qexp, w)) or (now + 1000)) - now end
            local n = math.min(freed, top)
            for _, w in ipairs(redis.call('ZRANGE', queue, '0', string.format('%d', n - 1))) do
                -- a token lives as long as the ticket, a grant's as its lease
                local tok, ttl = 'w', grants and grant(w, grants, lkey, live, ahead, now, t)
                if ttl then
                    tok, live, granted = 'g', live + 1, granted + 1
                else
                    ahead = ahead + 1
                    ttl = ticket_ttl(w)
                end
                wake(w, tok, ttl)
            end
            -- a waiter admitted by its own acquire passes the wake-up on to
            -- the new head (acquire.lua); one granted here cannot: while
            -- permits are left (a limit raised by set-limit), this call
            -- wakes the next one, whose acquire passes it on in turn
            if granted > 0 and top > n then
                local nxt = redis.call('ZRANGE', queue, string.format('%d', ahead), string.format('%d', ahead))[1]
                if nxt then wake(nxt, 'w', ticket_ttl(nxt)) end
            end
        end
    end
end
return removed
