-- reset.lua -- drops every holder of a semaphore (`conncap reset`, after an incident).
--
-- KEYS[1]  <prefix>{name}:holders  (see acquire.lua)
-- KEYS[2]  <prefix>{name}:since    acquire times of the holders
-- KEYS[3]  <prefix>{name}:stats    counters: full_since is cleared, resets counted
-- KEYS[4]  <prefix>{name}:audit    stream of events (only when ARGV[1] > 0)
-- ARGV[1]  audit stream MAXLEN ~ (0: no audit)
-- ARGV[2]  who asked (free text for the audit stream, e.g. user@host)
-- Returns the number of holders dropped.
--
-- Processes that still hold live connections re-register their permits at
-- their next heartbeat (renew with add_missing): a reset frees only the
-- permits of holders that are gone. Counters are kept (they are monotonic).
if redis.replicate_commands then redis.replicate_commands() end

local n = redis.call('ZCARD', KEYS[1])
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HDEL', KEYS[3], 'full_since')
redis.call('HINCRBY', KEYS[3], 'reset_dropped', n)
local audit_max = math.floor(tonumber(ARGV[1]) or 0)
if audit_max > 0 then
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', audit_max, '*', 'event', 'reset', 'by', ARGV[2] or '',
               'dropped', n)
end
return n
