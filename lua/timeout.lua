-- timeout.lua -- records that an acquirer gave up waiting (the counters and histogram conncap stats shows).
--
-- KEYS[1]  <prefix>{name}:stats    hash of counters (see acquire.lua)
-- KEYS[2]  <prefix>{name}:waiters  sorted set of waiting holder ids
-- KEYS[3]  <prefix>{name}:audit    stream of events (only when ARGV[3] > 0)
-- ARGV[1]  holder id that gave up
-- ARGV[2]  ms it waited (client clock)
-- ARGV[3]  audit stream MAXLEN ~ (0: no audit)
-- Returns 1.
--
-- Counts timed_out and feeds the same wait-time histogram as a grant
-- (wait_le_<ms>, wait_sum_ms, wait_count: buckets as in acquire.lua), so a
-- slow or partitioned semaphore shows up in the wait times too. Touches no
-- holder: a timeout never changes the count.

local stats, waiters, audit = KEYS[1], KEYS[2], KEYS[3]
local holder = ARGV[1]
local wait_ms = math.max(0, math.floor(tonumber(ARGV[2]) or 0))
local audit_max = math.floor(tonumber(ARGV[3]) or 0)

local bounds = {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}
local bucket = 'wait_le_inf'
for _, b in ipairs(bounds) do
    if wait_ms <= b then bucket = 'wait_le_' .. b break end
end
redis.call('HINCRBY', stats, 'timed_out', '1')
redis.call('HINCRBY', stats, bucket, '1')
redis.call('HINCRBY', stats, 'wait_count', '1')
redis.call('HINCRBY', stats, 'wait_sum_ms', wait_ms)
redis.call('ZREM', waiters, holder)
if audit_max > 0 then
    redis.call('XADD', audit, 'MAXLEN', '~', audit_max, '*', 'event', 'timeout', 'holder', holder,
               'wait_ms', wait_ms)
end
return 1
