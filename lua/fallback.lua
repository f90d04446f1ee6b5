-- fallback.lua -- counts the permits a process granted while Redis was down, now registered.
--
-- KEYS[1]  <prefix>{name}:stats    hash of counters (see acquire.lua)
-- ARGV[1]  how many (> 0)
-- Returns the new fallback_granted count.
local n = math.floor(tonumber(ARGV[1]) or 0)
if n <= 0 then
    return redis.error_reply('ERR conncap fallback: the count must be > 0')
end
return redis.call('HINCRBY', KEYS[1], 'fallback_granted', n)
