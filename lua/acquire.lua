-- acquire.lua -- admits a holder to a leased counting semaphore if below the limit.
--
-- KEYS[1]  <prefix>{name}:holders  sorted set: member holder id, score lease
--                                  expiry in ms of Redis server TIME
-- KEYS[2]  <prefix>{name}:limit    optional runtime override of the limit. It is
--                                  ops state written by `conncap set-limit` and
--                                  deliberately has no TTL: it stays until DEL.
-- KEYS[3]  <prefix>{name}:stats    hash of counters, no TTL (see below)
-- KEYS[4]  <prefix>{name}:queue    sorted set: waiting holder id -> arrival
--                                  (us of TIME); the FIFO order of waiters
-- KEYS[5]  <prefix>{name}:failover string "<end> <threshold> <ticket
--                                  threshold> <server>": a failover's
--                                  re-registration window (failover.lua,
--                                  below), read only while its marker is in
--                                  the holders set; the short call leaves
--                                  to the full call while it is there
-- KEYS[6]  <prefix>{name}:since    hash: holder id -> acquire time (ms, TIME) of
--                                  the holders renewed at least once (renew.lua
--                                  writes it; a holder never renewed was granted
--                                  at its score - lease)
-- KEYS[7]  <prefix>{name}:waiters  sorted set: holder id -> when its wait ends
-- KEYS[8]  <prefix>{name}:audit    stream of events (only when ARGV[12] > 0)
-- KEYS[9]  <prefix>{name}:qexp     sorted set: waiting holder id -> ticket
--                                  expiry (ms): a waiter that stops re-checking
--                                  (crashed) drops out of the queue then
-- KEYS[10] <prefix>{name}:rate     string: GCRA theoretical arrival time (us)
-- KEYS[11] <prefix>{name}:epoch    string, no TTL: server ms from which new
--                                  grants are allowed (restart grace, below)
-- KEYS[12] <prefix>{name}:grant    hash: waiting holder id -> "<lease ms>
--                                  <limit>": the waiters that take a permit
--                                  granted by a release (release.lua): a
--                                  ticket of a caller with flag "g" and no
--                                  rate has an entry, removed with it; a
--                                  ticket without one (an older shim's, or
--                                  under a rate) is only woken. Optional (a
--                                  call with 11 keys never writes it)
-- Every key the script may touch is declared (a cluster slot being migrated
-- answers TRYAGAIN rather than split them), but the wake lists
-- <prefix>{name}:wake:<holder id> (a list of at most one token), derived
-- from KEYS[4]: they share its hash tag, so its cluster slot.
-- ARGV[1]  holder id
-- ARGV[2]  lease in ms (> 0)
-- ARGV[3]  configured limit (used when the limit key is absent or not a number)
-- The rest may be left out from the end on (sem.c sends none past the last
-- that is not its default), the common call being ARGV[1..5]:
-- ARGV[4]  ticket TTL in ms (default 0): > 0 queues HOLDER when not admitted
--          (or refreshes its ticket); 0 tries once without queueing
-- ARGV[5]  ms until this acquirer gives up (default 0: it will not wait), for
--          waiters
-- ARGV[6]  ms this acquirer has waited so far (client clock; default 0), for
--          the histogram
-- ARGV[7]  flags (default ''): "u" push a token to HOLDER's own wake list (ends
--          its pending BLPOP on another connection); "l" leave the queue if
--          not admitted; "g" HOLDER takes grants (release.lua may admit
--          it while it waits and push 'g' to its wake list: its process
--          then connects without another acquire); ignored under a rate
-- ARGV[8]  rate: new permits per second over the fleet (default 0: no rate
--          limit)
-- ARGV[9]  burst (>= 1, default 1): permits the rate lets through at once
-- ARGV[10] restart grace in ms (default 0: off): when KEYS[11] is
--          missing -- Redis never saw this semaphore, or lost its data (a
--          restart without persistence, a flush) -- it is set to now + grace,
--          and until then only holders asking again keep permits: the holders
--          of before the loss re-register with their next heartbeat
--          (renew.lua) meanwhile, so the fleet never counts from zero.
-- ARGV[11] max_waiters (default 0: no bound): a caller that is not admitted,
--          holds no ticket and would queue (ARGV[4] > 0) behind this many
--          tickets is not queued; it is counted (stats queue_full) and told so
--          (below)
-- ARGV[12] audit stream MAXLEN ~ (default 0: no audit)
-- Failover window (failover.lua opened it on a new master): its marker, the
-- member '!failover' of the holders set with score 0, sorts first among the
-- expired holders the sweep reads anyway, so no call looks for it. While
-- the window is open (until <end>) new grants wait as for the restart
-- grace, and the holders re-register (renew.lua); the first acquire after
-- it drops the live holders whose lease ends before <threshold> (nobody
-- renewed or granted them since the window opened: their releases were lost
-- with the old master, or their process is gone), at most SWEEP per call,
-- counted in reclaimed, and the tickets whose TTL ends before <ticket
-- threshold> (no attempt since it opened), and removes the marker with the
-- last of them.
-- Returns {granted (0/1), count after the call, limit in force, retry_ms,
-- wake_ms, queue_full (0/1)}: retry_ms > 0: admitted by the limit and the
-- queue, but the rate or the restart grace says not yet: the next slot is in
-- that many ms; wake_ms: ms until the earliest live lease ends, when a waiter
-- must re-check even if nobody wakes it (-1: none); the 7th element, the
-- tickets queued after the call. A grant with nothing more to say (no
-- retry, no wake, an empty queue) answers its first three only (each
-- element is Redis's work). The short call (below) answers 12 instead
-- when it cannot decide.
--
-- Bounded work: one call drops at most SWEEP expired holders and SWEEP dead
-- tickets, and wakes at most as many waiters as it freed permits or queue
-- places. The count is of live holders (lease end > now): while more than
-- SWEEP expired ones wait to be dropped, ZCOUNT counts the live ones, so a
-- dead holder's permit is free at the end of its lease whether or not it
-- was dropped yet, and each acquire or renew drops SWEEP more.
-- Time is the server's (TIME), never the client's (Redis replicates a
-- script's effects, not the script, since 5.0, so writes after TIME are
-- safe without redis.replicate_commands; renew.lua's ZMSCORE needs 6.2). Expired holders (score <=
-- now) are dropped first (at most SWEEP, the rest not counted), so a crashed
-- holder's permit comes back after its lease whatever other holders do.
-- The holders key's TTL is at least the longest remaining lease: a grant
-- that finds less than its own lease left on it (or a new key) sets it to
-- (latest lease expiry - now) + lease, so it never expires while a lease is
-- live, and an idle semaphore (nobody renewing) vanishes at most one lease
-- (the longest in use) after its last lease ended; in between, grants leave
-- it alone (it covers their lease already: so did the grant or renew.lua
-- that set it). renew.lua gives since the same TTL. Releasing the last
-- holder deletes the key at once.
--
-- Counters (stats): a grant that never waited counts in acquired only, one
-- HINCRBY; the CLI counts it as a wait of 0 ms (cli/ops.c). full_since (how
-- long no permit has been free) and full_limit (the limit it was set under)
-- are set by the grant that fills the semaphore, or by a refusal that finds
-- them unset or set under another limit; nothing clears them: readers show
-- full_since only while the live holders reach the limit.
--
-- Cost: the fast path (a free permit, empty queue, no rate, no audit, a
-- caller that never waited) makes few redis.call (each costs far more than
-- Lua's own work) and builds no table, closure or string for the rest.
-- Arguments are strings where they can be: a string.format('%d') costs less
-- than the %.17g that redis.call makes of a number.

local holders, holder = KEYS[1], ARGV[1]
local lease = tonumber(ARGV[2])
if not lease or lease <= 0 then
    return redis.error_reply('ERR conncap acquire: lease_ms must be > 0')
end

local t = redis.call('TIME')
local us = tonumber(t[2]) -- (converted once: Lua arithmetic converts a string at every use)
local now = t[1] * 1000 + (us - us % 1000) / 1000
-- now as a string for redis.call (a number given to it costs a %.17g), made
-- where a call needs it (a string.format is a tenth of the fast path's Lua):
-- now_s = now_s or string.format('%d', now)
local now_s
local expiry = string.format('%d', now + lease)
local wait_ms, wait_s = 0, '0' -- stats: ms waited so far
if ARGV[6] and ARGV[6] ~= '0' then
    wait_ms = math.max(0, math.floor(tonumber(ARGV[6]) or 0))
    wait_s = string.format('%d', wait_ms)
end

-- The short call (KEYS[1..5], ARGV[1..3]: sem.c sends it while the
-- semaphore was free at its last call, for a caller without rate, grace,
-- audit, flags but "g", or time waited) admits HOLDER when the common call
-- below would, and otherwise writes nothing and returns 12: make the full
-- call (this one declared no key to sweep or queue with). One EXISTS of
-- holders, queue, limit and failover says which of them are there, up to
-- which of the last three when only one of them is: a semaphore without
-- queue, limit override or failover window reads none of them (the limit
-- is then ARGV[3], as below). It admits while the holders, their leases
-- ended or not, are below the limit, and sweeps none: an ended lease's
-- permit is needed back only when the others are all taken, and then the
-- full call follows and sweeps (so at most the limit of them wait for it;
-- the count it answers includes them).
local SWEEP, SWEEP_S, MARK = 50, '50', '!failover' -- (a string for redis.call: a number costs it a %.17g)
local short, count, qlen, limit, limit_s = KEYS[6] == nil, 0, nil, nil, nil -- (limit_s: its text, when it came as one)
if not short then
    count = redis.call('ZCARD', holders) -- live holders, kept up to date from here on
elseif ARGV[4] or not KEYS[5] then
    return 12
else
    local e = redis.call('EXISTS', holders, KEYS[4], KEYS[2], KEYS[5])
    if e > 0 then
        count = redis.call('ZCARD', holders)
        if count > 0 then e = e - 1 end
    end
    if e > 1 then return 12 end -- a queue or a failover window
    limit, limit_s = tonumber(ARGV[3]) or 0, ARGV[3]
    if e == 1 then -- the limit key, a queue or a failover window
        local l = redis.call('GET', KEYS[2])
        if not l then return 12 end
        if tonumber(l) then limit, limit_s = tonumber(l), l end
    end
    qlen = 0
end
-- the holders the sweep drops (their lease ended), at most SWEEP: none in
-- an empty set, else usually none, so one read
local swept, n_swept, window = nil, 0, false
if short then
    -- (no sweep: above)
elseif count > 0 then
    now_s = string.format('%d', now)
    swept = redis.call('ZRANGEBYSCORE', holders, '-inf', now_s, 'LIMIT', '0', SWEEP_S)
    n_swept = #swept
    local more = n_swept == SWEEP
    if n_swept > 0 and swept[1] == MARK then -- a failover window (score 0: first): not a holder
        table.remove(swept, 1)
        n_swept, count, window = n_swept - 1, count - 1, true
    end
    if n_swept > 0 then
        redis.call('ZREM', holders, unpack(swept))
        count = count - n_swept
    end
    if more then
        -- more may have expired: count the live ones, and drop HOLDER's own
        -- ended lease now, so that it asks again as a newcomer
        count = redis.call('ZCOUNT', holders, '(' .. now_s, '+inf')
        local mine = redis.call('ZSCORE', holders, holder)
        if mine and tonumber(mine) <= now then
            redis.call('ZREM', holders, holder)
            n_swept = n_swept + 1
            swept[n_swept] = holder
        end
    end
end

if not short then
    limit_s = redis.call('GET', KEYS[2])
    if not (limit_s and tonumber(limit_s)) then limit_s = ARGV[3] end
    limit = tonumber(limit_s) or 0
end

-- The common call, straight through: nothing swept, no failover window, an
-- empty queue, a free permit, and a caller with nothing else to do (no
-- rate, no restart grace, no audit, never waited, no flag but "g", which
-- matters only to a caller that queues). It does what the rest of the
-- script does then (ZADD, the holders key's TTL, acquired, full_since),
-- without the rest's locals and branches. Otherwise QLEN, read here, is
-- still the queue's length below (nothing was written in between).
if short or n_swept == 0 and not window and wait_ms == 0 and (not ARGV[7] or ARGV[7] == '' or ARGV[7] == 'g') and
   (not ARGV[8] or ARGV[8] == '0' or ARGV[8] == '0.000000') and (not ARGV[10] or ARGV[10] == '0') and
   (not ARGV[12] or ARGV[12] == '0') then
    qlen = qlen or redis.call('ZCARD', KEYS[4])
    if qlen == 0 and count < limit then
        local was_holder = redis.call('ZADD', holders, expiry, holder) == 0
        if not was_holder then count = count + 1 end
        local pttl = -1
        if count > 1 or was_holder then pttl = redis.call('PTTL', holders) end
        if pttl < lease then
            local ttl = lease + lease
            if count > 1 then
                local top = redis.call('ZRANGE', holders, '-1', '-1', 'WITHSCORES')
                ttl = top[2] - now + lease
            end
            redis.call('PEXPIRE', holders, string.format('%d', ttl))
        end
        if not was_holder then
            redis.call('HINCRBY', KEYS[3], 'acquired', '1')
            if count == limit then
                -- (the limit's own text when it is a plain integer: a tostring is a %.14g)
                if not (limit_s and (limit_s == ARGV[3] or string.find(limit_s, '^[1-9]%d*$'))) then
                    limit_s = tostring(limit)
                end
                redis.call('HSET', KEYS[3], 'full_since', now_s or string.format('%d', now), 'full_limit', limit_s)
            end
        end
        return {1, count, limit} -- (a grant with nothing more to say: sem.c reads the rest as 0, -1, 0, 0)
    end
end
if short then return 12 end -- no permit free

-- failover window: ms left of it (new grants wait), or after it, drop the
-- holders nobody re-registered (with the swept ones: counted, acquire
-- times deleted, waiters woken for them), and the tickets nobody refreshed
-- (waiters gone, or that got their permit from the old master: their
-- tickets there were replicated, their leaving was not), which would hold
-- the head of the queue until their TTL
local window_left, window_places = 0, 0
if window then
    local w = redis.call('GET', KEYS[5])
    local e, thr, qthr
    if w then e, thr, qthr = string.match(w, '^(%d+) (%d+) (%d+) ') end
    if e and tonumber(e) > now then
        window_left = tonumber(e) - now
    else
        local gone, stale = {}, {}
        if thr then
            now_s = now_s or string.format('%d', now)
            gone = redis.call('ZRANGEBYSCORE', holders, '(' .. now_s, '(' .. thr, 'LIMIT', '0', SWEEP_S)
            stale = redis.call('ZRANGEBYSCORE', KEYS[9], '(' .. now_s, '(' .. qthr, 'LIMIT', '0', SWEEP_S)
        end
        if #gone > 0 then
            redis.call('ZREM', holders, unpack(gone))
            count = count - #gone
            for _, g in ipairs(gone) do
                n_swept = n_swept + 1
                swept[n_swept] = g
            end
        end
        if #stale > 0 then
            local wake, wbase = {}, string.sub(KEYS[4], 1, -6) .. 'wake:'
            for i, d in ipairs(stale) do wake[i] = wbase .. d end
            redis.call('ZREM', KEYS[4], unpack(stale))
            redis.call('ZREM', KEYS[9], unpack(stale))
            redis.call('DEL', unpack(wake))
            if KEYS[12] then redis.call('HDEL', KEYS[12], unpack(stale)) end
            window_places = #stale
        end
        if #gone < SWEEP and #stale < SWEEP then redis.call('ZREM', holders, MARK) end
    end
end

-- fair queue and rate limit --
-- Fairness is the "fair semaphore" of Redis in Action 6.3.2 (and of the
-- redis-semaphore package's fair variant) turned into a queue: waiters hold
-- tickets ordered by arrival, and a permit freed while the queue is not empty
-- goes to the first (limit - count) live tickets only; a newcomer lines up
-- behind them. Rate: GCRA (the generic cell rate algorithm, as in
-- redis-cell), with server time: one permit every 1/rate s, up to burst at once.
-- An empty queue has no tickets, dead or alive, and nobody to wake: its
-- ZCARD is all the queue work then (queue and qexp hold the same members,
-- added and removed together, with the same TTL).
-- The queue state is plain locals, and the wake list prefix is made where it
-- is used: the fast path builds no table, closure or string for it.
-- FREED counts the permits this call frees, PLACES the queue places: it
-- wakes at most that many waiters (places count only when the queue is
-- longer than the free permits: otherwise every waiter may go already).
local queue = KEYS[4] -- wake lists: queue minus 'queue', plus 'wake:' and the holder id
local flags, rate, retry, hint, freed, places, queued, pos = ARGV[7] or '', 0, 0, -1, n_swept, window_places, false, 0
local takes_grants = false -- flag "g": not a flag of what this call does, so out of FLAGS
if flags ~= '' and string.find(flags, 'g', 1, true) then
    takes_grants, flags = true, (string.gsub(flags, 'g', ''))
end
if ARGV[8] and ARGV[8] ~= '0' and ARGV[8] ~= '0.000000' then rate = tonumber(ARGV[8]) or 0 end -- (sem.c's %.6f)
qlen = qlen or redis.call('ZCARD', queue)
local qlen0 = qlen
if qlen > 0 then
    -- tickets not refreshed in time: their waiters are gone
    local qexp, wbase = KEYS[9], string.sub(KEYS[4], 1, -6) .. 'wake:'
    now_s = now_s or string.format('%d', now)
    local dead = redis.call('ZRANGEBYSCORE', qexp, '-inf', now_s, 'LIMIT', '0', SWEEP_S)
    if #dead > 0 then
        local wake = {}
        for i, d in ipairs(dead) do wake[i] = wbase .. d end
        qlen = qlen - redis.call('ZREM', queue, unpack(dead))
        redis.call('ZREM', qexp, unpack(dead))
        redis.call('DEL', unpack(wake))
        if KEYS[12] then redis.call('HDEL', KEYS[12], unpack(dead)) end
        places = places + #dead
    end
    -- ZRANK's nil reply is false in Lua: a caller without a ticket
    -- is not queued (and leaves nothing, wakes nobody)
    local rank = redis.call('ZRANK', queue, holder)
    queued = rank ~= false and rank ~= nil
    pos = rank or qlen
end

-- restart grace (opt-in): ms left before new grants, 0 when none
local grace = 0
if ARGV[10] and ARGV[10] ~= '0' then
    local opens = tonumber(redis.call('GET', KEYS[11]))
    if not opens then
        opens = now + (tonumber(ARGV[10]) or 0)
        redis.call('SET', KEYS[11], string.format('%d', opens))
    end
    if opens > now then grace = opens - now end
end
if window_left > grace then grace = window_left end

-- A free permit that neither the queue nor the rate holds back: one ZADD
-- both admits HOLDER and tells whether it held a permit already (0 added).
-- Otherwise a holder asking again keeps its permit (its lease renewed)
-- whatever the queue and the rate say, as before.
local granted, was_holder = 0, false
if grace == 0 and count < limit and rate <= 0 and pos < limit - count then
    was_holder = redis.call('ZADD', holders, expiry, holder) == 0
    granted = 1
elseif redis.call('ZSCORE', holders, holder) then
    redis.call('ZADD', holders, expiry, holder)
    was_holder, granted = true, 1
elseif grace == 0 and count < limit and rate > 0 and pos < limit - count then
    -- the rate (GCRA): may HOLDER take a free permit now? Consumes a slot if so.
    local T, burst = 1000000 / rate, math.max(tonumber(ARGV[9]) or 1, 1)
    local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- server time in us
    local tat = math.max(tonumber(redis.call('GET', KEYS[10])) or 0, now_us)
    local early = tat - T * (burst - 1) - now_us
    if early > 0 then
        -- the waiters ahead of HOLDER take the slots before its own
        retry = math.ceil((early + pos * T) / 1000)
    else
        local ntat = tat + T
        redis.call('SET', KEYS[10], string.format('%.3f', ntat), 'PX',
                   string.format('%d', math.ceil((ntat - now_us) / 1000) + 1))
        redis.call('ZADD', holders, expiry, holder)
        granted = 1
    end
elseif grace > 0 then
    retry = math.max(retry, grace) -- a waiter tries again when the grace ends
end
local fresh = granted == 1 and not was_holder -- a new grant
if fresh then count = count + 1 end
-- the queue's bound: a newcomer that would wait behind max_waiters tickets
local ticket_ttl = granted == 0 and (tonumber(ARGV[4]) or 0) or 0
local leave = flags ~= '' and string.find(flags, 'l', 1, true)
local full = 0
if ticket_ttl > 0 and not queued and not leave and ARGV[11] and ARGV[11] ~= '0' then
    local maxw = tonumber(ARGV[11]) or 0
    if maxw > 0 and qlen >= maxw then full, ticket_ttl = 1, 0 end
end

-- acquire times: the since hash holds those of holders renewed at least
-- once (renew.lua writes them); a grant writes none, as a holder never
-- renewed was granted at its score - lease (the CLI reads it so). The sweep
-- drops the swept holders' entries.
local since = KEYS[6]
for i = 1, n_swept, 1000 do
    redis.call('HDEL', since, unpack(swept, i, math.min(i + 999, n_swept)))
end
-- TTL of the holders key. A grant needs the key to outlive its lease; when
-- less than one lease is left (or the key is new or lost its TTL), it gets
-- (latest expiry - now) + lease. Otherwise the TTL already covers this lease
-- and, by this same rule, every other live one. (since gets the same TTL
-- from renew.lua, the only writer of its entries.)
if granted == 1 then
    local pttl = -1
    if count > 1 or was_holder then pttl = redis.call('PTTL', holders) end
    if pttl < lease then
        local ttl = lease + lease -- HOLDER alone: its expiry is the latest
        if count > 1 then
            local top = redis.call('ZRANGE', holders, '-1', '-1', 'WITHSCORES')
            ttl = top[2] - now + lease -- >= 2 leases: HOLDER's is in it
        end
        redis.call('PEXPIRE', holders, string.format('%d', ttl))
    end
end
-- counters, wait histogram, waiters, audit --
-- The stats hash has no TTL: its counters are monotonic (Prometheus
-- counters), so it outlives idle periods. since and waiters live as long as
-- the holders key / the longest wait; both stay O(1) per call when nothing
-- expired (the sweep reads only expired members).
do
    local stats = KEYS[3]
    if n_swept > 0 then redis.call('HINCRBY', stats, 'reclaimed', n_swept) end
    local ev
    if fresh then
        -- a grant that never waited counts in acquired only: the CLI adds
        -- acquired - (wait_count - timed_out) of them to wait_count and
        -- wait_le_1 (cli/ops.c), one call instead of three
        redis.call('HINCRBY', stats, 'acquired', '1')
        if wait_ms > 0 then
            local bucket = 'wait_le_inf'
            for _, b in ipairs({1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}) do
                if wait_ms <= b then bucket = 'wait_le_' .. b break end
            end
            redis.call('HINCRBY', stats, bucket, '1')
            redis.call('HINCRBY', stats, 'wait_count', '1')
            redis.call('HINCRBY', stats, 'wait_sum_ms', wait_s)
        end
        ev = 'acquire'
    elseif granted == 0 then
        redis.call('HINCRBY', stats, 'denied', '1')
        if full == 1 then redis.call('HINCRBY', stats, 'queue_full', '1') end
    end
    -- full_since (the gauge of how long no permit has been free) with the
    -- limit it was set under: set by the grant that fills the semaphore, or
    -- by a refusal that finds it unset or set under another limit (a limit
    -- lowered under the holders). Nothing clears it: readers show it only
    -- while the live holders reach the limit (cli/ops.c), and the next time
    -- the semaphore fills, its grant sets it anew.
    -- (tostring of a number is a %.14g: made only when written or compared)
    if fresh and count == limit then
        now_s = now_s or string.format('%d', now)
        redis.call('HSET', stats, 'full_since', now_s, 'full_limit', tostring(limit))
    elseif granted == 0 and count >= limit then
        local g, lim_s = redis.call('HMGET', stats, 'full_since', 'full_limit'), tostring(limit)
        now_s = now_s or string.format('%d', now)
        if not g[1] or g[2] ~= lim_s then redis.call('HSET', stats, 'full_since', now_s, 'full_limit', lim_s) end
    end
    -- waiters: only a caller that was refused (or may have been: it waited,
    -- or holds or held a ticket) is or was listed there
    if granted == 0 or wait_ms > 0 or queued or flags ~= '' then
        local waiters = KEYS[7]
        local wait_left = math.max(0, math.floor(tonumber(ARGV[5]) or 0))
        if fresh or full == 1 then
            redis.call('ZREM', waiters, holder)
        elseif granted == 0 and wait_left > 0 then
            redis.call('ZADD', waiters, string.format('%d', now + wait_left + 1000), holder)
        end
        now_s = now_s or string.format('%d', now)
        local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', now_s, 'LIMIT', '0', SWEEP_S)
        if #gone > 0 then redis.call('ZREM', waiters, unpack(gone)) end
        -- the key outlives every entry: one added here lengthens its TTL
        -- when short of its own end, to twice that (the next ones of the
        -- same wait find it long enough: a PTTL, no write); never shortened
        if granted == 0 and wait_left > 0 and not (fresh or full == 1) and
           redis.call('PTTL', waiters) < wait_left + 1001 then
            redis.call('PEXPIRE', waiters, string.format('%d', 2 * (wait_left + 1001)))
        end
    end
    local audit_max = ARGV[12] == '0' and 0 or math.floor(tonumber(ARGV[12]) or 0)
    if ev and audit_max > 0 then
        redis.call('XADD', KEYS[8], 'MAXLEN', '~', audit_max, '*', 'event', ev, 'holder', holder,
                   'wait_ms', wait_ms, 'count', count, 'limit', limit)
    end
end
-- queue bookkeeping, wake-ups --
do
    local qexp = KEYS[9]
    if granted == 1 or ticket_ttl <= 0 or leave then
        if queued then
            redis.call('ZREM', queue, holder)
            redis.call('ZREM', qexp, holder)
            if KEYS[12] then redis.call('HDEL', KEYS[12], holder) end
            qlen = qlen - 1
            -- a waiter that gives up frees a place: the one behind may go;
            -- one that takes its permit passes the wake-up on (a limit
            -- raised by set-limit lets the queue in one by one, not at once)
            if granted == 1 then freed = freed + 1 else places = places + 1 end
        end
        -- a caller that never held a ticket nor waited has no wake list
        if queued or flags ~= '' or wait_ms > 0 then
            redis.call('DEL', string.sub(KEYS[4], 1, -6) .. 'wake:' .. holder)
        end
    else
        qlen = qlen + redis.call('ZADD', queue, 'NX',
                                 string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), holder)
        redis.call('ZADD', qexp, string.format('%d', now + ticket_ttl), holder)
        local gkey -- the grant hash, when this ticket has an entry there
        -- a waiter that takes grants says with what lease and limit
        -- (release.lua admits it as this call would; not under a rate)
        if takes_grants and KEYS[12] and rate <= 0 then
            redis.call('HSET', KEYS[12], holder, ARGV[2] .. ' ' .. string.format('%d', tonumber(ARGV[3]) or 0))
            gkey = KEYS[12]
        elseif queued and KEYS[12] then
            redis.call('HDEL', KEYS[12], holder) -- no longer (a rate set by a reload, a waiter polling)
        end
        -- (queue and qexp hold the same members, made and emptied together,
        -- and get the same TTL here: one PTTL tells both)
        local ttl_s = string.format('%d', ticket_ttl)
        if redis.call('PTTL', queue) < ticket_ttl then
            redis.call('PEXPIRE', queue, ttl_s)
            redis.call('PEXPIRE', qexp, ttl_s)
        end
        if gkey and redis.call('PTTL', gkey) < ticket_ttl then redis.call('PEXPIRE', gkey, ttl_s) end
        if retry == 0 and count > 0 then
            now_s = now_s or string.format('%d', now)
            local first = redis.call('ZRANGEBYSCORE', holders, '(' .. now_s, '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
            if first[2] then hint = math.max(0, tonumber(first[2]) - now) end
        end
    end
    -- permits freed by lease expiry, or queue places freed: the first
    -- (limit - count) waiters may go; wake the first FREED of them (each
    -- list holds one token: a waiter woken twice takes one). From the head,
    -- not the ones this call let in: a wake-up a waiter could not use (it
    -- saw a lower limit -- a process whose configuration is older -- or it
    -- died) must not leave the head asleep while permits are free; each
    -- waiter admitted passes the wake-up on to the new head.
    local free = limit - count
    local top = math.min(free, qlen)
    if free < qlen0 then freed = freed + places end
    if freed > 0 and top > 0 then
        local wbase = string.sub(KEYS[4], 1, -6) .. 'wake:'
        for _, w in ipairs(redis.call('ZRANGE', queue, '0', string.format('%d', math.min(freed, top) - 1))) do
            if w ~= holder then
                local e = tonumber(redis.call('ZSCORE', qexp, w)) or (now + 1000)
                if redis.call('LPUSH', wbase .. w, 'w') > 1 then redis.call('LTRIM', wbase .. w, '0', '0') end
                redis.call('PEXPIRE', wbase .. w, string.format('%d', math.max(1, e - now)))
            end
        end
    end
    if flags ~= '' and string.find(flags, 'u', 1, true) then
        local mykey = string.sub(KEYS[4], 1, -6) .. 'wake:' .. holder
        if redis.call('LPUSH', mykey, 'u') > 1 then redis.call('LTRIM', mykey, '0', '0') end
        redis.call('PEXPIRE', mykey, string.format('%d', math.max(tonumber(ARGV[4]) or 0, 1000)))
    end
end
-- 7th: the tickets queued after the call (for the refusal's log line; readers take 6 too)
return {granted, count, limit, retry, hint, full, qlen}
