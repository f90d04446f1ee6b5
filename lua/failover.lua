-- failover.lua -- opens a failover's re-registration window on a semaphore, on the master that took over.
--
-- KEYS[1]  <prefix>{name}:holders   (see acquire.lua)
-- KEYS[2]  <prefix>{name}:failover  string "<end> <threshold> <ticket threshold> <server>",
--                                   TTL window + lease
-- ARGV[1]  the window in ms (> 0): about one heartbeat (a third of the lease) and a margin
-- ARGV[2]  lease in ms (> 0): the shortest lease of the caller's permits
-- ARGV[3]  the server (host:port) the caller found serving the semaphore
-- ARGV[4]  a waiter's ticket TTL in ms (> 0): a waiter that tried again since
--          now has a ticket that expires at now + this or later
-- Returns 1 when this call opened a window, 0 when this server has had one
-- for this failover already (open, or closed less than a lease ago).
--
-- A process whose client saw the master change (core/redis.h
-- ccap_redis_key_epoch) calls it before anything else there, then renews its
-- permits (renew.lua, which adds them if missing). Every live process renews
-- its permits within a heartbeat, so when the window ends the live holders
-- all have a lease ending at <threshold> (now + lease) or later; those with
-- an older one are held by nobody: their releases went to the old master
-- (and were lost with it), or their process is gone. The same for the
-- tickets of the queue (a waiter tries again within the window: its retry
-- comes at its end), against <ticket threshold>. Until <end> acquire.lua
-- grants no new permit (the old master's grants are not all here yet: they
-- are registered within the window); then its first call drops those
-- holders and removes the marker. The marker is the member '!failover' of
-- the holders set, score 0 (no holder id has no '/'): the sweeps of
-- acquire.lua and renew.lua read the expired members first anyway, so they
-- see it with no call of their own; readers of live holders (score > now)
-- never see it.
--
-- Opens once per failover and server: the key names the server, so a caller
-- that notices the same failover later (its heartbeat came last) joins the
-- window instead of opening another, while one to another server (a second
-- failover) replaces it. The holders key is kept alive through the window.
local holders, key, server = KEYS[1], KEYS[2], ARGV[3] or ''
local w, lease, tt = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[4])
if not w or w <= 0 or not lease or lease <= 0 or not tt or tt <= 0 then
    return redis.error_reply('ERR conncap failover: window, lease and ticket TTL must be > 0')
end
local cur = redis.call('GET', key)
if cur and string.match(cur, '^%d+ %d+ %d+ (.*)$') == server then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = string.format('%d', w + lease)
redis.call('SET', key, string.format('%d %d %d %s', now + w, now + lease, now + tt, server), 'PX', ttl)
redis.call('ZADD', holders, '0', '!failover')
if redis.call('PTTL', holders) < w + lease then redis.call('PEXPIRE', holders, ttl) end
return 1
