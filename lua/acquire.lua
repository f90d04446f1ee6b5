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

redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)

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
return {granted, count, limit}
