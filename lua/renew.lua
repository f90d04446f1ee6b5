-- renew.lua -- extends the leases of a batch of holders in one call.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- ARGV[1]  lease in ms (> 0)
-- ARGV[2]  add_missing: 1 to add missing holders again (even above the limit:
--          they hold live connections that Redis forgot, e.g. after a restart
--          or failover), 0 to only count them
-- ARGV[3..] holder ids
-- Returns the number of holders that were missing from the set.
--
-- Present holders get expiry now + lease (server TIME); that includes one
-- whose lease ran out but was not swept yet (nobody was admitted in its place).
-- Other holders whose lease has expired are dropped afterwards. The key's TTL is then set to
-- (latest expiry - now) + lease, as in acquire.lua.
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
        end
    end
end

redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)

if redis.call('ZCARD', holders) > 0 then
    local top = redis.call('ZRANGE', holders, -1, -1, 'WITHSCORES')
    local ttl = tonumber(top[2]) - now + lease
    if ttl < lease then ttl = lease end
    redis.call('PEXPIRE', holders, string.format('%d', ttl))
end
return missing
