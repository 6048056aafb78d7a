
-- announce: ARGV[6] the swarm's name, ARGV[7] the swarm cap, ARGV[8] the
-- table cap, ARGV[9] id (hex), ARGV[10] ip, ARGV[11] port, ARGV[12] "1" if
-- a seed, ARGV[13] the event, ARGV[14] numwant, ARGV[15] a new secret in
-- case there is none yet.
--
-- Returns {kind, swarm size, complete, peers stopped, expired, table full,
-- swarms idle, limit, peers}: kind 0 peers picked for the asker, 1 rate
-- limited, 2 late (both: the cached list), 3 stopped (no peers).
local name, maxSwarms, capacity = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local id, ip, port, seeding = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local event, numwant, newSecret = ARGV[13], tonumber(ARGV[14]), ARGV[15]
local idle, limit = 0, 0

-- The swarm: one idle for EXPIRY is dropped and begins anew, as are (a
-- few at a time) the other idle ones; a new one past maxSwarms pushes
-- out the one idle longest.
local sw = keys(name)
local last = redis.call('ZSCORE', reg, name)
if last and now - num(last) >= EXPIRY then
	drop(sw)
	redis.call('ZREM', reg, name)
	idle = idle + 1
	last = nil
end
idle = idle + dropIdle(16)
if not last then
	while redis.call('ZCARD', reg) >= maxSwarms do
		local old = redis.call('ZPOPMIN', reg)
		drop(keys(old[1]))
		limit = limit + 1
	end
end
redis.call('ZADD', reg, now, name)

local expired = expire(sw)
local seen = num(redis.call('ZSCORE', sw.p, id))
local old = seen and redis.call('HGET', sw.i, id)

local function answer(kind, stopped, full, peers)
	local n, c = size(sw)
	return { kind, n, c, stopped, expired, full, idle, limit, peers }
end

if event == 'stopped' then
	-- Peers learn each other's ids: only the address a peer announced
	-- from may take it out.
	if old then
		local _, oldIP = info(old)
		if oldIP == ip then
			removePeer(sw, id)
			local x = stops(sw, bucket(now))
			redis.call('INCR', x)
			redis.call('PEXPIRE', x, ttl)
			redis.call('HINCRBY', sw.m, 'dn', 1)
			redis.call('ZADD', sw.d, now, id .. '|' .. ip)
			redis.call('ZREMRANGEBYRANK', sw.d, 0, -DEPARTURES - 1)
			touch(sw)
			return answer(3, 1, 0, '')
		end
	end
	return answer(3, 0, 0, '')
end
if not seen and event ~= 'started' then
	-- A late announce of a peer that has left.
	local at = num(redis.call('ZSCORE', sw.d, id .. '|' .. ip))
	if at and now - at < interval then return answer(2, 0, 0, cached(sw)) end
end
if seen and now - seen < GAP and (event ~= 'completed' or (old and string.sub(old, 1, 1) == '1')) then
	return answer(1, 0, 0, cached(sw))
end

local full = 0
if not seen and redis.call('ZCARD', sw.p) >= capacity then
	local gone = redis.call('ZPOPMIN', sw.p)
	removePeer(sw, gone[1])
	redis.call('HSET', sw.m, 'ovf', now)
	full = 1
end
redis.call('ZADD', sw.p, now, id)
local v = seeding .. '|' .. ip .. '|' .. port
if v ~= old then
	-- A peer whose address changed has moved: the latest announce is
	-- where it can be reached.
	redis.call('HSET', sw.i, id, v)
	local reachable = port ~= '0'
	redis.call(seeding == '1' and 'SADD' or 'SREM', sw.s, id)
	redis.call((seeding == '1' and reachable) and 'SADD' or 'SREM', sw.rs, id)
	redis.call(reachable and 'SADD' or 'SREM', sw.r, id)
end
if event == 'started' then
	redis.call('LPUSH', sw.a, id)
	redis.call('LTRIM', sw.a, 0, ARRIVALS - 1)
end
-- The estimator counts a keyed hash of the id: ids chosen to pile up in
-- one register (Redis hashes what it is given with a fixed seed) would
-- swing the estimate.
local secret = redis.call('GET', prefix .. 'secret')
if not secret then
	secret = newSecret
	redis.call('SET', prefix .. 'secret', secret)
end
local h = hll(sw, bucket(now))
if redis.call('PFADD', h, redis.sha1hex(secret .. id)) == 1 then
	redis.call('HINCRBY', sw.m, 'dn', 1)
end
redis.call('PEXPIRE', h, ttl)
touch(sw)
return answer(0, 0, full, pick(sw, id, numwant))
