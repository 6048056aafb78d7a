
-- announce: ARGV[8] the swarm cap, ARGV[9] the table cap, ARGV[10] a key
-- for the estimator's hash, should a swarm have none yet; then one or more
-- announces, of ANNOUNCE arguments each: now, a random seed, now less the
-- expiry and the estimator's bucket (as ARGV[1], [5], [6], [7], which they
-- replace for it), the swarm's name, id (hex), ip, port, "1" if a seed,
-- the event, numwant. The tracker sends together the announces made at
-- once (group commit): each is applied in turn, as a call of its own would
-- apply it, and a script failure fails them all.
--
-- Returns, per announce, {kind, swarm size, complete, peers stopped,
-- expired, table full, swarms idle, limit, peers}: kind 0 peers picked for
-- the asker, 1 rate limited, 2 late (both: the cached list), 3 stopped (no
-- peers).
local maxSwarms, capacity, newKey = tonumber(ARGV[8]), tonumber(ARGV[9]), ARGV[10]
local ANNOUNCE = 11

local function announce(o)
	at(ARGV[o], ARGV[o + 1], ARGV[o + 2], ARGV[o + 3])
	local name, id, ip, port = ARGV[o + 4], ARGV[o + 5], ARGV[o + 6], ARGV[o + 7]
	local seeding, event, numwant = ARGV[o + 8], ARGV[o + 9], tonumber(ARGV[o + 10])
	local idle, limit = 0, 0

	-- The swarm. One idle for EXPIRY goes on as if new (all its peers have
	-- expired; Stats counts it dropped). A new one first sweeps away (a few)
	-- idle ones, then, past maxSwarms, pushes out the one idle longest.
	local sw = open(name)
	if redis.call('ZADD', reg, nowS, name) == 1 then
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

	local row = readMeta(sw, id)
	local expired = expire(sw)
	local seen = num(redis.call('ZSCORE', sw.p, id))
	-- The row read before expiry went is the peer's only if it is still there.
	local old = seen and row

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
				local x = stops(sw, cur)
				redis.call('INCR', x)
				expiring(x)
				counted(sw)
				redis.call('ZADD', sw.d, nowS, id .. '|' .. ip)
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
	if redis.call('ZADD', sw.p, nowS, id) == 1 and sw.n == 0 then expiring(sw.p) end
	local lo = sw.w.lo or sw.meta.lo
	if sw.n == 0 or (lo and now < lo) then sw.w.lo = now end
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
	-- The estimator counts a hash of the id keyed by the swarm's own secret:
	-- ids chosen to pile up in one register (Redis hashes what it is given
	-- with a fixed seed) would swing the estimate. Each bucket gets its TTL
	-- when it is made.
	local key = sw.meta.k
	if not key then
		key = newKey
		sw.w.k = key
	end
	local h = hll(sw, cur)
	if redis.call('PFADD', h, redis.sha1hex(key .. id)) == 1 then counted(sw) end
	if sw.meta.hb ~= curS then
		expiring(h)
		sw.w.hb = curS
	end
	touch(sw)
	return answer(0, 0, full, pick(sw, id, numwant))
end

local out = {}
for o = 11, #ARGV, ANNOUNCE do
	out[#out + 1] = announce(o)
end
return out
