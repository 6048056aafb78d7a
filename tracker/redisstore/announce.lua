
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

-- The swarm. One idle for EXPIRY goes on as if new (all its peers have
-- expired; Stats counts it dropped). A new one first sweeps away (a few)
-- idle ones, then, past maxSwarms, pushes out the one idle longest.
local sw = open(name)
if redis.call('ZADD', reg, now, name) == 1 then
	idle = idle + dropIdle(16)
	while redis.call('ZCARD', reg) > maxSwarms do
		-- The one idle longest, never this one (a tie, a clock gone back).
		local oldest = redis.call('ZRANGE', reg, 0, 1)
		local victim = oldest[1] == name and oldest[2] or oldest[1]
		redis.call('ZREM', reg, victim)
		drop(open(victim))
		limit = limit + 1
	end
end

readMeta(sw)
local expired = expire(sw)
local seen = num(redis.call('ZSCORE', sw.p, id))
local old = seen and redis.call('HGET', sw.i, id)

local function answer(kind, stopped, full, peers)
	local n, c = size(sw)
	flush(sw)
	return { kind, n, c, stopped, expired, full, idle, limit, peers }
end

if event == 'stopped' then
	-- Peers learn each other's ids: only the address a peer announced
	-- from may take it out.
	if old then
		local _, oldIP = info(old)
		if oldIP == ip then
			redis.call('ZREM', sw.p, id)
			setPeer(sw, id, old, nil)
			local x = stops(sw, bucket(now))
			redis.call('INCR', x)
			expiring(x)
			sw.w.dn = (sw.meta.dn or 0) + 1
			redis.call('ZADD', sw.d, now, id .. '|' .. ip)
			redis.call('ZREMRANGEBYRANK', sw.d, 0, -DEPARTURES - 1)
			expiring(sw.d)
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
if not old and sw.n >= capacity then
	local gone = redis.call('ZPOPMIN', sw.p)
	setPeer(sw, gone[1], redis.call('HGET', sw.i, gone[1]), nil)
	sw.w.ovf = now
	full = 1
end
if redis.call('ZADD', sw.p, now, id) == 1 and sw.n == 0 then expiring(sw.p) end
-- New, or moved (a new address: the latest announce is where it can be
-- reached), or now a seed.
setPeer(sw, id, old or nil, seeding .. '|' .. ip .. '|' .. port)
if event == 'started' then
	if redis.call('LPUSH', sw.a, id) > ARRIVALS then
		redis.call('LTRIM', sw.a, 0, ARRIVALS - 1)
	end
	expiring(sw.a)
	sw.w.arr = now
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
	sw.w.dn = (sw.meta.dn or 0) + 1
	expiring(h)
end
touch(sw)
return answer(0, 0, full, pick(sw, id, numwant))
