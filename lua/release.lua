-- release.lua -- gives back exactly one holder's permit; idempotent.
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- ARGV[1]  holder id
-- stats (ops, issue 7): keys and args appended after the above --
-- KEYS[2]  <prefix>{name}:stats  KEYS[3] <prefix>{name}:since
-- KEYS[4]  <prefix>{name}:audit  (see acquire.lua)
-- ARGV[2]  audit stream MAXLEN ~ (0: no audit)
-- -- end stats --
-- Returns 1 if the holder was removed, 0 if it held no permit.
--
-- Only this member is removed, never another holder. The TTL invariant (the
-- key's TTL is at least the longest remaining lease) holds after a removal
-- without touching the TTL: removing a member cannot raise the latest expiry.
-- Removing the last member deletes the key (Redis drops empty sorted sets).
if redis.replicate_commands then redis.replicate_commands() end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
-- stats: released counter, acquire time, full_since, audit --
if removed == 1 then
    local stats = KEYS[2]
    redis.call('HINCRBY', stats, 'released', 1)
    redis.call('HDEL', KEYS[3], ARGV[1])
    local lim = tonumber(redis.call('HGET', stats, 'limit'))
    if lim and redis.call('ZCARD', KEYS[1]) < lim then
        redis.call('HDEL', stats, 'full_since')
    end
    local audit_max = math.floor(tonumber(ARGV[2]) or 0)
    if audit_max > 0 then
        redis.call('XADD', KEYS[4], 'MAXLEN', '~', audit_max, '*', 'event', 'release', 'holder', ARGV[1],
                   'count', redis.call('ZCARD', KEYS[1]))
    end
end
-- end stats --
return removed
