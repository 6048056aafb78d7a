
-- announce: args[7] the swarm cap, args[8] the table cap, args[9] the
-- estimator's key the tracker hashed ids with, args[10] the cap of peers
-- of one source in a table; then one or more announces,
-- of ANNOUNCE arguments each: now and the estimator's bucket (as args[1]
-- and [6], which they replace for it), the swarm's name, id (hex), info
-- ("1|ip|port" for a seed, else "0|ip|port"), the event, numwant, the
-- estimator's bits for the id (CountingID's, see count). The tracker sends together the
-- announces made at once (group commit): each is applied in turn, as a
-- call of its own would apply it, and a failure fails them all.
--
-- Returns one list, of, for each announce in turn: its kind, plus 4 if a
-- peer was pushed out of the full table, plus 8 if the counts of other
-- removals follow, plus 16 if the peer was not added (its source has
-- perAddress peers in the table), plus 32 if the swarm is new and was not
-- kept (maxSwarms swarms, none it may push out); swarm size, complete;
-- should they follow, peers stopped, expired, swarms idle, limit; the
-- number of values of peers that follow, the values. Kind 0: the peers
-- for the asker (see pickFor); 1 rate limited, 2 late: the cached list,
-- one string of lines; 3 stopped, none. One list, rather than one per announce: Redis looks each
-- list it answers with over for the fields that make it something else
-- (an error, a status, a map...), and values it makes take time.
local maxSwarms, capacity, perAddress
local ANNOUNCE = 8

-- header appends to out the values an answer starts with (see above),
-- with 0 for the swarm size, complete and the count of the values of peers
-- that follow, and returns where the swarm size and that count go.
local function header(out, kind, stopped, full, expired, idle, limit)
	local k = #out
	if stopped + expired + idle + limit > 0 then
		out[k + 1], out[k + 2], out[k + 3] = kind + 4 * full + 8, 0, 0
		out[k + 4], out[k + 5], out[k + 6], out[k + 7] = stopped, expired, idle, limit
		out[k + 8] = 0
		return k + 2, k + 8
	end
	out[k + 1], out[k + 2], out[k + 3], out[k + 4] = kind + 4 * full, 0, 0, 0
	return k + 2, k + 4
end

-- answer appends to out the answer to an announce to sw, with the cached
-- list (nil: no peers).
local function answer(out, sw, kind, stopped, full, expired, idle, limit, list)
	local at, count = header(out, kind, stopped, full, expired, idle, limit)
	local n, c = size(sw)
	flush(sw)
	out[at], out[at + 1] = n, c
	if list then out[count], out[count + 1] = 1, list end
end

-- Who may push out whose swarm past maxSwarms (package tracker's
-- share.go). makers holds the maker of each swarm in the registry (the
-- source of the announce that made it), set and removed with its place
-- there, so that it cannot drift from it whatever vanishes by TTL. share
-- counts the swarms each source made: a cache of those counts, built from
-- makers when a new swarm finds the registry full, and kept while it stays
-- full (every swarm made then comes through pushOut). A swarm made while
-- the registry is not full, the common case, costs the one write to
-- makers; share, which would miss it, is deleted then if it is there
-- (MaxSwarms was raised), and whenever else it may miss a change (a swarm
-- dropped idle, one made anew after it was idle).

-- shares builds share from makers, unless it is there.
local function shares()
	if call('EXISTS', share) == 1 then return end
	local counts = {}
	for _, src in ipairs(call('HVALS', makers)) do counts[src] = (counts[src] or 0) + 1 end
	local args = {}
	for src, k in pairs(counts) do
		args[#args + 1], args[#args + 2] = k, src
		if #args >= 1000 then
			call('ZADD', share, unpack(args))
			args = {}
		end
	end
	if #args > 0 then call('ZADD', share, unpack(args)) end
end

-- oldest returns the first swarm of the ZSET z (the registry, or the lone
-- ones), idle longest first, whose maker is in the set may (true: any
-- maker), and that maker.
local function oldest(z, may)
	local from, n = 0, 16
	while true do
		local names = call('ZRANGE', z, from, from + n - 1)
		if #names == 0 then return nil end
		local by = call('HMGET', makers, unpack(names))
		for j, name in ipairs(names) do
			local src = by[j]
			if src and (may == true or may[src]) then return name, src end
		end
		from, n = from + n, min(2 * n, 256)
	end
end

-- madeAs returns the set of the sources that made k swarms.
local function madeAs(k)
	local set = {}
	for _, src in ipairs(call('ZRANGEBYSCORE', share, k, k)) do set[src] = true end
	return set
end

-- pushOut makes room for a new swarm, which src makes, by pushing out
-- the swarm the rule picks, and reports whether there was one: with n the
-- swarms src made, the lone one idle longest of the sources that made the
-- most, if more than n + 1, else their swarm idle longest; else the lone
-- one idle longest of a source that made more than n (any, when n is 0;
-- else one that made n + 1, the most), or of src.
local function pushOut(src)
	shares()
	local n = num(call('ZSCORE', share, src)) or 0
	local most = num(call('ZREVRANGE', share, 0, 0, 'WITHSCORES')[2]) or 0
	local victim, by
	if most > n + 1 then
		local top = madeAs(most)
		victim, by = oldest(lone, top)
		if not victim then victim, by = oldest(reg, top) end
	else
		local may = true
		if n > 0 then
			may = most > n and madeAs(most) or {}
			may[src] = true
		end
		victim, by = oldest(lone, may)
	end
	if not victim then return false end
	call('ZREM', reg, victim)
	drop(open(victim))
	if num(call('ZINCRBY', share, -1, by)) <= 0 then call('ZREM', share, by) end
	return true
end

-- announce applies the announce whose arguments start at args[o], and
-- appends its answer to out.
local function announce(args, o, out)
	at(args[o], args[o + 1])
	local name, id, v = args[o + 2], args[o + 3], args[o + 4]
	local event, numwant = args[o + 5], tonumber(args[o + 6])
	local idle, limit = 0, 0

	-- The swarm. One idle for EXPIRY goes on as if new (all its peers have
	-- expired; Stats counts it dropped), made by this announce's source. A
	-- new one first sweeps away (a few) idle ones, then, past maxSwarms,
	-- pushes out a swarm (pushOut), never this one (in neither makers nor
	-- lone yet), or is not kept. The registry (and that of the lone ones)
	-- is told of a swarm's announces at most once per GAP, which spares
	-- most announces a ZADD; a swarm may then go as idle, or be pushed
	-- out, up to GAP sooner than in memory.
	local sw = open(name)
	local row = readMeta(sw, id)
	local ra = sw.meta[RA]
	if not (ra and now >= ra and now - ra < GAP) then
		if call('ZADD', reg, nowS, name) == 1 then
			idle = idle + dropIdle(16)
			local src, full = maker(infoIP(v)), false
			while call('ZCARD', reg) > maxSwarms do
				if not pushOut(src) then
					call('ZREM', reg, name)
					local at = header(out, 3 + 32, 0, 0, 0, idle, limit)
					if event ~= 'stopped' then out[at], out[at + 1] = 1, complete(v) and 1 or 0 end
					return
				end
				full = true
				limit = limit + 1
			end
			call('HSET', makers, name, src)
			if full then
				call('ZINCRBY', share, 1, src)
			elseif call('EXISTS', share) == 1 then
				call('DEL', share)
			end
			call('ZADD', lone, nowS, name)
		else
			if sw.ns < 2 then call('ZADD', lone, nowS, name) end
			if not ra or now - ra >= EXPIRY then
				-- Idle (or its keys gone with their TTL): made anew.
				call('HSET', makers, name, maker(infoIP(v)))
				call('DEL', share)
			end
		end
		sw.w[RA] = now
	end

	local expired = expire(sw)
	-- A peer has a row if and only if it is in the table; the row read
	-- before expiry went is the peer's only if it is still there.
	local seen = row and num(call('ZSCORE', sw.p, id .. '|' .. row))
	local old = seen and row

	if event == 'stopped' then
		-- Peers learn each other's ids: only the address a peer announced
		-- from may take it out.
		local ip = infoIP(v)
		if old then
			if infoIP(old) == ip then
				call('ZREM', sw.p, id .. '|' .. old)
				setPeer(sw, id, old, nil)
				local _, bS = bucket(sw)
				local x = stops(sw, bS)
				call('INCR', x)
				expiring(x)
				counted(sw, bS)
				local d = key(sw, 'd')
				call('ZADD', d, nowS, id .. '|' .. ip)
				call('ZREMRANGEBYRANK', d, 0, -DEPARTURES - 1)
				expiring(d)
				local dl = sw.meta[DL]
				if not dl or now > dl then sw.w[DL] = now end
				return answer(out, sw, 3, 1, 0, expired, idle, limit, nil)
			end
		end
		return answer(out, sw, 3, 0, 0, expired, idle, limit, nil)
	end
	-- A late announce of a peer that has left, unless none left within
	-- the interval.
	local dl = sw.meta[DL]
	if not seen and event ~= 'started' and dl and now - dl < interval then
		local at = num(call('ZSCORE', key(sw, 'd'), id .. '|' .. infoIP(v)))
		if at and now - at < interval then return answer(out, sw, 2, 0, 0, expired, idle, limit, cached(sw)) end
	end
	if seen and now - seen < GAP and (event ~= 'completed' or complete(old)) then
		return answer(out, sw, 1, 0, 0, expired, idle, limit, cached(sw))
	end

	local full = 0
	if not old and not joins(sw, infoIP(v), perAddress) then
		-- Counted (as one of its source's perAddress), answered, not kept:
		-- ids cost nothing, and would push out the others.
		count(sw, args[o + 7])
		local at, count = header(out, 16, 0, 0, expired, idle, limit)
		out[count] = pickFor(sw, id .. '|' .. v, id, numwant, 0, out)
		local n, c = size(sw)
		flush(sw)
		out[at], out[at + 1] = n, c
		return
	end
	if not old and sw.n >= capacity then
		local gone = call('ZPOPMIN', sw.p)[1]
		if gone then
			setPeer(sw, lineID(gone), lineRow(gone), nil)
			sw.w[OVF] = now
			full = 1
		else
			-- The count says full and the table is empty: they parted
			-- (keys evicted under maxmemory, or dropped by hand). The
			-- table is what is true.
			sw.n, sw.c = 0, 0
		end
	end
	-- New, or moved (a new address: the latest announce is where it can be
	-- reached), or now a seed.
	local line = id .. '|' .. v
	if old and old ~= v then call('ZREM', sw.p, id .. '|' .. old) end
	if call('ZADD', sw.p, nowS, line) == 1 and sw.n == 0 then expiring(sw.p) end
	local lo = sw.w[LO] or sw.meta[LO]
	if sw.n == 0 or (lo and now < lo) then sw.w[LO] = now end
	if event == 'started' then
		local a = key(sw, 'a')
		if call('LPUSH', a, id) > ARRIVALS then
			call('LTRIM', a, 0, ARRIVALS - 1)
		end
		expiring(a)
		sw.w[ARR] = now
	end
	count(sw, args[o + 7])

	-- A newcomer is picked peers for before it is added to them, which
	-- spares the pick a peer to leave out (and the set of peers it drew
	-- from, if any, was made before, and has its TTL).
	local at, count = header(out, 0, 0, full, expired, idle, limit)
	if old then
		setPeer(sw, id, old, v)
		out[count] = pickFor(sw, line, id, numwant, reachable(v) and 1 or 0, out)
	else
		local drew
		out[count], drew = pickFor(sw, line, id, numwant, 0, out)
		if setPeer(sw, id, nil, v, true) and not drew then expiring(key(sw, 'r')) end
	end
	local n, c = size(sw)
	flush(sw)
	out[at], out[at + 1] = n, c
end

local function announceAll(args)
	setup(args)
	maxSwarms, capacity, perAddress = tonumber(args[7]), tonumber(args[8]), tonumber(args[10])
	-- The estimator's bits come from a hash of the id keyed by a secret
	-- every tracker sharing the Redis takes from it, so that each counts a
	-- peer once, and no one can choose ids that set the same bits; a
	-- tracker whose key is not the one in Redis (it went) loads it anew.
	if call('GET', prefix .. 'key') ~= args[9] then
		return redis.error_reply('STALEKEY the estimator key changed')
	end
	local out = {}
	for o = 11, #args, ANNOUNCE do
		announce(args, o, out)
	end
	return out
end
