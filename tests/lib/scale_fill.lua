-- scale_fill.lua -- fills one semaphore as a large fleet would (tests/integration/ops_scale.sh, bench/cli_scale.sh).
-- KEYS: <prefix>{name}: holders, since, waiters, queue, qexp.
-- ARGV: holders, waiters, now (server ms), host. Adds the holders with an
-- hour's lease (distinct lease ends) and their acquire times, and the waiters
-- to the waiters set, the FIFO queue and the ticket expiries, as the scripts
-- keep them. Returns the number of holders. One call: run it before the slow
-- log is armed.
local nh, nw, now, host = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local function flush(key, t) if #t > 0 then redis.call(key == KEYS[2] and 'HSET' or 'ZADD', key, unpack(t)) end end
local z, h = {}, {}
for i = 1, nh do
    local id = host .. '/' .. (1000 + i % 30000) .. '/' .. (3 + i) .. '/10.0.0.1:443/' .. string.format('%x', i) .. '.1'
    z[#z + 1] = now + 3600000 + i; z[#z + 1] = id
    h[#h + 1] = id; h[#h + 1] = now - i
    if #z >= 2000 then flush(KEYS[1], z); flush(KEYS[2], h); z, h = {}, {} end
end
flush(KEYS[1], z); flush(KEYS[2], h)
local w, q, e = {}, {}, {}
for i = 1, nw do
    local id = host .. '/' .. (40000 + i) .. '/5/10.0.0.1:443/w' .. string.format('%x', i) .. '.1'
    w[#w + 1] = now + 3600000; w[#w + 1] = id
    q[#q + 1] = now * 1000 + i; q[#q + 1] = id
    e[#e + 1] = now + 3600000; e[#e + 1] = id
    if #w >= 2000 then flush(KEYS[3], w); flush(KEYS[4], q); flush(KEYS[5], e); w, q, e = {}, {}, {} end
end
flush(KEYS[3], w); flush(KEYS[4], q); flush(KEYS[5], e)
return redis.call('ZCARD', KEYS[1])
