-- renew.lua -- extends the leases of a batch of holders in one call.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- ARGV[1]  lease in ms (> 0)
-- ARGV[2]  add_missing: 1 to add missing holders again (even above the limit:
--          they hold live connections that Redis forgot, e.g. after a restart
--          or failover), 0 to only count them
-- ARGV[3..] holder ids
-- stats (ops, issue 7): keys appended after the above --
-- KEYS[2]  <prefix>{name}:stats  KEYS[3] <prefix>{name}:since  (see acquire.lua)
-- Counts re-added holders (reregistered) and swept ones (reclaimed); a
-- re-added holder's acquire time becomes now if Redis lost it.
-- -- end stats --
-- Returns the number of holders that were missing from the set.
--
-- Present holders get expiry now + lease (server TIME); that includes one
-- whose lease ran out but was not swept yet (nobody was admitted in its place).
-- Other holders whose lease has expired are dropped afterwards. The key's TTL is then set to
-- (latest expiry - now) + lease, as in acquire.lua, and since gets the very
-- same TTL: acquire.lua reads the TTL of both from since.
if redis.replicate_commands then redis.replicate_commands() end

local holders = KEYS[1]
local lease = tonumber(ARGV[1])
if not lease or lease <= 0 then
    return redis.error_reply('ERR conncap renew: lease_ms must be > 0')
end
local add_missing = ARGV[2] == '1'

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + lease)

local missing = 0
for i = 3, #ARGV do
    if redis.call('ZSCORE', holders, ARGV[i]) then
        redis.call('ZADD', holders, expiry, ARGV[i])
    else
        missing = missing + 1
        if add_missing then
            redis.call('ZADD', holders, expiry, ARGV[i])
            redis.call('HSETNX', KEYS[3], ARGV[i], string.format('%d', now)) -- stats
        end
    end
end

-- stats: the holders the sweep below drops (their lease ended) --
local swept = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
-- end stats --
redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)

if redis.call('ZCARD', holders) > 0 then
    local top = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
    local ttl = tonumber(top[2]) - now + lease
    if ttl < lease then ttl = lease end
    redis.call('PEXPIRE', holders, string.format('%d', ttl))
end
-- stats: reregistered, reclaimed, acquire times, full_since --
do
    local stats, since = KEYS[2], KEYS[3]
    if add_missing and missing > 0 then
        redis.call('HINCRBY', stats, 'reregistered', missing)
    end
    if #swept > 0 then
        redis.call('HINCRBY', stats, 'reclaimed', #swept)
        for i = 1, #swept, 1000 do
            redis.call('HDEL', since, unpack(swept, i, math.min(i + 999, #swept)))
        end
        local lim = tonumber(redis.call('HGET', stats, 'limit'))
        if lim and redis.call('ZCARD', holders) < lim then
            redis.call('HDEL', stats, 'full_since')
        end
    end
    local pttl = redis.call('PTTL', holders)
    if pttl > 0 then redis.call('PEXPIRE', since, pttl) end
end
-- end stats --
return missing
