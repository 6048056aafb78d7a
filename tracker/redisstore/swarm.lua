-- The tracker's swarms in Redis: the common part of the three calls
-- (announce.lua, peers.lua, stats.lua are appended to it, and the whole is
-- loaded as a library of Redis functions, or sent as a script each, see
-- scripts.go). Each call runs atomically, so replicas sharing a Redis never
-- see half an announce.
-- redisstore.go documents the key layout; package tracker's swarm.go is
-- the in-memory version of the same decisions, and the conformance suite
-- (package storetest) holds both to the same behaviour.
--
-- Times are milliseconds since the epoch, passed in by the tracker (no
-- script reads Redis's clock, so tests can drive the time). Key TTLs are
-- only there to collect what a crash left: every decision uses the times
-- stored in scores and fields.
--
-- Every call takes first, in args[1] to args[6]: now, the interval (ms),
-- the key prefix, the keys' TTL (ms), a random seed in [1, 2^31-2], the
-- current estimator bucket (now / half an interval): decimal integers,
-- made by the tracker.
--
-- Redis runs the calls on one core for every tracker sharing it, so they
-- are written for its time. Most of it goes to Lua itself: each string
-- Lua makes is hashed, byte by byte, and kept once; a table grows by
-- copying; numbers turn into strings with a printf and back with a
-- strtod; garbage is collected as the calls go. So times go to Redis as
-- the strings given, fields are written only when they change, keys are
-- made only when used, and what a call returns to the tracker is one
-- list.

-- The library functions used most, as locals (a global is looked up in a
-- table at each use), set by setup: a library's text runs, when it is
-- loaded, without the standard library.
local call, byte, tonumber, ipairs, unpack, max, min, floor

local ttl, interval, prefix, reg, lone, makers, share
local nowS, now, seedS, seed, cutoffS, cutoff, curS, cur
local EXPIRY -- a peer, or a swarm, silent this long is gone

-- at sets the time the decisions are taken at, as args[1] and [6] give
-- it: announce.lua, which takes several announces in one call, sets each
-- one's own before it. Only now is needed as a number every time: the
-- bucket is, when it is, by bucketN, and now less the expiry as a string
-- by cutoffStr.
local function at(nowArg, curArg)
	nowS, curS = nowArg, curArg
	now, cur, cutoffS = tonumber(nowS), nil, nil
	cutoff = now - EXPIRY
end

-- cutoffStr returns now less the expiry (3 intervals) as a string.
local function cutoffStr()
	if not cutoffS then cutoffS = string.format('%d', cutoff) end
	return cutoffS
end

-- setup takes the arguments every call takes first.
local function setup(args)
	call, byte, tonumber, ipairs, unpack = redis.call, string.byte, _G.tonumber, _G.ipairs, _G.unpack
	max, min, floor = math.max, math.min, math.floor
	ttl, interval, prefix = args[4], tonumber(args[2]), args[3]
	reg = prefix .. 'swarms'
	lone = prefix .. 'lone'
	makers = prefix .. 'makers'
	share = prefix .. 'share'
	EXPIRY = 3 * interval
	seedS, seed = args[5], nil
	at(args[1], args[6])
end

-- bucketN returns the current estimator bucket as a number.
local function bucketN()
	if not cur then cur = tonumber(curS) end
	return cur
end

local GAP = 1000            -- minAnnounceGap
local ARRIVALS = 16         -- arrivalRing
local DEPARTURES = 64       -- stoppedRing
local CACHED = 51           -- MaxNumWant+1: the cached list, for anyone
local KEPT_BUCKETS = 7      -- buckets a key's TTL may still keep alive
-- Longer than hash-max-listpack-value (a literal: a library's text, run
-- when it is loaded, has no string library).
local PAD = '--------------------------------------------------------------------------------'

-- Park-Miller: exact in Lua's doubles, and seeded by the caller (Redis
-- seeds math.random the same way for every script).
local function rnd(n)
	seed = ((seed or tonumber(seedS)) * 16807) % 2147483647
	return 1 + (seed % n)
end

local function shuffle(t)
	for j = 1, #t - 1 do
		local r = j + rnd(#t - j + 1) - 1
		t[j], t[r] = t[r], t[j]
	end
end

-- num reads a number Redis returned. Scores come back as "1e+12" when
-- that is shorter, which not every Lua's tonumber reads.
local function num(s)
	if not s then return nil end
	local n = tonumber(s)
	if n then return n end
	local m, e = string.match(s, '^(-?[%d.]+)[eE]%+?(%d+)$')
	if m then return tonumber(m) * 10 ^ tonumber(e) end
	return nil
end

-- open returns the swarm named name (swarmName in redisstore.go): the
-- keys of its table and hash, the others made by key when first needed.
-- readMeta reads its fields once (meta), flush writes those set in w and
-- the peers' rows set in rows (field, value, ...).
local function open(name)
	local b = prefix .. '{' .. name .. '}'
	return {
		name = name, base = b,
		p = b .. ':p',   -- ZSET "id|complete|ip|port" -> last seen: the table
		i = b .. ':i',   -- HASH id -> "complete|ip|port", and the swarm's
		                 -- fields (FIELDS)
		r = false,       -- SET "id|complete|ip|port" of reachable peers
		rs = false,      -- SET "id|complete|ip|port" of reachable seeds
		a = false,       -- LIST latest arrivals, newest first
		d = false,       -- ZSET "id|ip" -> when it said stopped
		meta = false, w = {}, rows = false, n = 0, c = 0, made = false,
	}
end

-- key returns the key of the swarm's sw[f] ('r', 'rs', 'a' or 'd').
local function key(sw, f)
	local k = sw[f]
	if not k then
		k = sw.base .. ':' .. f
		sw[f] = k
	end
	return k
end

-- The swarm's fields, kept in its hash next to the peers' (whose names,
-- hex ids, are longer), by their place in FIELDS: N and C the table's
-- size and seeds, OVF the last overflow, EST, ESTB, DN the estimate, the
-- bucket it was made in and the bits the bucket gained since, ARR the
-- last arrival, LO a time no peer in the table was seen before (expiry has
-- nothing to do until then), DL the latest "stopped" that took a peer
-- out, RA the announce the registry was last told of, HB the estimator's
-- latest bucket (see bucket); ESTB and HB are kept as strings, the others
-- read as numbers. CACHE and CAT, the cached peer list and its time, are
-- read on their own (see cached). NS counts the sources (see source) of
-- the table's peers: a swarm of fewer than two is lone (in the registry
-- "lone" too) and the first to go past maxSwarms. A swarm's fields are a
-- list rather than a table by name: Lua makes room for a name as it is
-- set. The count of the table's peers of a source s is the field "@s".
local N, C, OVF, EST, ESTB, DN, ARR, LO, DL, RA, HB, NS, CACHE, CAT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14
local FIELDS = { 'n', 'c', 'ovf', 'est', 'estb', 'dn', 'arr', 'lo', 'dl', 'ra', 'hb', 'ns', 'cache', 'cat' }
local NUMBERS = { N, C, OVF, EST, DN, ARR, LO, DL, RA, NS }

-- readMeta reads the swarm's fields (not the cached list) and, given an
-- id, that peer's row, in one call.
local function readMeta(sw, id)
	local m
	if id then
		m = call('HMGET', sw.i, 'n', 'c', 'ovf', 'est', 'estb', 'dn', 'arr', 'lo', 'dl', 'ra', 'hb', 'ns', id)
	else
		m = call('HMGET', sw.i, 'n', 'c', 'ovf', 'est', 'estb', 'dn', 'arr', 'lo', 'dl', 'ra', 'hb', 'ns')
	end
	for _, j in ipairs(NUMBERS) do
		if m[j] then m[j] = num(m[j]) end
	end
	local row = m[NS + 1]
	m[NS + 1] = nil
	sw.meta, sw.made = m, m[N] and true
	-- Every change to the table goes through setPeer, which keeps these.
	sw.n, sw.c, sw.ns = m[N] or 0, m[C] or 0, m[NS] or 0
	return row
end

-- expiring gives a key just written the TTL, should the write have made it.
local function expiring(k) call('PEXPIRE', k, ttl) end

-- flush writes the rows set and the fields set in sw.w that changed, in
-- one call; now goes as the string given.
local function flush(sw)
	local w, args = sw.w, sw.rows
	if not args then
		if next(w) == nil then return end
		args = {}
	end
	sw.rows = false
	local m = sw.meta
	-- A swarm whose peers came to be of two sources, or no more, leaves
	-- the lone ones, or joins them.
	local ns = w[NS]
	if ns and (ns >= 2) ~= ((m[NS] or 0) >= 2) then
		if ns >= 2 then
			call('ZREM', lone, sw.name)
		else
			call('ZADD', lone, nowS, sw.name)
		end
	end
	for j, v in pairs(w) do
		if m[j] ~= v then
			args[#args + 1] = FIELDS[j]
			args[#args + 1] = (v == now and nowS) or v
			m[j] = v
		end
	end
	sw.w = {}
	if #args == 0 then return end
	call('HSET', sw.i, unpack(args))
	-- A swarm's hash is made with its first peer, which gives it the TTL;
	-- should fields come first, they do.
	if not sw.made then
		sw.made = true
		expiring(sw.i)
	end
end

-- The estimator's keys of a bucket, named by the bucket as a string
-- (bucketS turns a number into one): its bits (see count) and the count
-- of peers that said stopped in it.
local function bucketS(b) return b == bucketN() and curS or string.format('%d', b) end
local function bucketKey(sw, bS) return sw.base .. ':h:' .. bS end
local function stops(sw, bS) return sw.base .. ':x:' .. bS end

local function drop(sw)
	local ks = { sw.p, sw.i, key(sw, 'r'), key(sw, 'rs'), key(sw, 'a'), key(sw, 'd') }
	for j = 0, KEPT_BUCKETS - 1 do
		local bS = bucketS(bucketN() - j)
		ks[#ks + 1] = bucketKey(sw, bS)
		ks[#ks + 1] = stops(sw, bS)
	end
	call('DEL', unpack(ks))
	call('ZREM', lone, sw.name)
	call('HDEL', makers, sw.name)
end

-- touch renews the TTL of every key of the swarm (and a key written since
-- is given one by its writer: expiring writes it). count calls it once a
-- bucket, half an interval.
local function touch(sw)
	call('PEXPIRE', sw.p, ttl)
	call('PEXPIRE', sw.i, ttl)
	call('PEXPIRE', key(sw, 'r'), ttl)
	call('PEXPIRE', key(sw, 'rs'), ttl)
	call('PEXPIRE', key(sw, 'a'), ttl)
	call('PEXPIRE', key(sw, 'd'), ttl)
end

-- dropIdle drops up to max swarms no one announced to for EXPIRY. The
-- counts of the swarms each source made then go (see shares in
-- announce.lua): the next swarm made may fit, and would not be counted.
local function dropIdle(max)
	local idle = call('ZRANGEBYSCORE', reg, '-inf', cutoffStr(), 'LIMIT', 0, max)
	for _, name in ipairs(idle) do
		drop(open(name))
		call('ZREM', reg, name)
	end
	if #idle > 0 then call('DEL', share) end
	return #idle
end

-- A peer's info "c|ip|port": complete, when c is 1; reachable, when the
-- port is not 0; and the IP. The first two look at bytes, rather than
-- make strings of them.
local function complete(v) return byte(v, 1) == 49 end
local function reachable(v) return byte(v, -1) ~= 48 or byte(v, -2) ~= 124 end
local function infoIP(v) return string.match(v, '^%d|(.*)|%d+$') end

-- source returns the source the peer at ip is counted under (Source in
-- package tracker): an IPv4 address, or an IPv6 address's /64 as its
-- first four groups (ip as Go writes it, canonical); nil for 127.0.0.1
-- and ::1, which are exempt.
local function source(ip)
	if not string.find(ip, ':', 1, true) then
		if ip == '127.0.0.1' then return nil end
		return ip
	end
	if string.find(ip, '.', 1, true) then
		-- ::ffff:a.b.c.d, which Go counts as a.b.c.d.
		return source(string.match(ip, '([^:]*)$'))
	end
	if ip == '::1' then return nil end
	local head, tail = string.match(ip, '^(.-)::(.*)$')
	if not head then head, tail = ip, '' end
	local g = {}
	for x in string.gmatch(head, '[^:]+') do g[#g + 1] = x end
	if #g < 4 then
		local t = {}
		for x in string.gmatch(tail, '[^:]+') do t[#t + 1] = x end
		for _ = 1, 8 - #g - #t do g[#g + 1] = '0' end
		for _, x in ipairs(t) do g[#g + 1] = x end
	end
	return g[1] .. ':' .. g[2] .. ':' .. g[3] .. ':' .. g[4]
end

-- maker returns who a swarm made by an announce from ip counts as made
-- by (maker in package tracker): its source, or 'lo' for 127.0.0.1 and
-- ::1, the host's own.
local function maker(ip) return source(ip) or 'lo' end

-- joins counts the table's peers of the source of ip one more, for a
-- newcomer about to be added, and returns true; or, if the source has
-- perAddress already, changes nothing and returns false. (Counting first
-- spares the usual newcomer a call to look.)
local function joins(sw, ip, perAddress)
	local src = source(ip)
	if not src then
		sw.ns = sw.ns + 1
	else
		local k = call('HINCRBY', sw.i, '@' .. src, 1)
		if k > perAddress then
			call('HINCRBY', sw.i, '@' .. src, -1)
			return false
		end
		if k == 1 then sw.ns = sw.ns + 1 end
	end
	sw.w[NS] = sw.ns
	return true
end

-- tally adds (n 1) or takes off (n -1) a peer at ip to the counts of
-- sources.
local function tally(sw, ip, n)
	local src = source(ip)
	if not src then
		sw.ns = sw.ns + n
	else
		local k = call('HINCRBY', sw.i, '@' .. src, n)
		if k <= 0 then
			call('HDEL', sw.i, '@' .. src)
			sw.ns = sw.ns - 1
		elseif k == 1 and n > 0 then
			sw.ns = sw.ns + 1
		end
	end
	sw.w[NS] = sw.ns
end

-- A peer's line "id|c|ip|port": its id (32 hex digits) and its info.
local function lineID(line) return string.sub(line, 1, 32) end
local function lineRow(line) return string.sub(line, 34) end

-- setPeer records that the peer id, in the table with the info old ("c|ip|
-- port", or nil if it was not), now has the info v (nil: it is gone):
-- its row, the sets it is picked from, the counts. The caller keeps the
-- ZSET of the table. With later, for a newcomer, it leaves giving the set
-- of reachable peers its TTL, should it have made it, to the caller, and
-- returns whether it added to it; and the count of its source, to joins.
local function setPeer(sw, id, old, v, later)
	if old == v then return false end
	local oc, nc = old and complete(old), v and complete(v)
	local added = false
	local oip, nip = old and infoIP(old), v and infoIP(v)
	if oip ~= nip then
		if oip then tally(sw, oip, -1) end
		if nip and not later then tally(sw, nip, 1) end
	end
	if old and reachable(old) then
		call('SREM', key(sw, 'r'), id .. '|' .. old)
		if oc then call('SREM', key(sw, 'rs'), id .. '|' .. old) end
	end
	if v and reachable(v) then
		local r = key(sw, 'r')
		call('SADD', r, id .. '|' .. v)
		if later then
			added = true
		else
			expiring(r)
		end
		if nc then
			local rs = key(sw, 'rs')
			call('SADD', rs, id .. '|' .. v)
			expiring(rs)
		end
	end
	if v then
		-- Written by flush, with the swarm's fields.
		local rows = sw.rows
		if not rows then
			rows = {}
			sw.rows = rows
		end
		rows[#rows + 1], rows[#rows + 2] = id, v
		if not old and sw.n == 0 then
			-- The first peer: the hash also gets a field longer than
			-- Redis keeps in a compact (listpack) hash, whose lookups
			-- scan every field, so that it is a hash table from the start.
			rows[#rows + 1], rows[#rows + 2] = '~', PAD
		end
	else
		call('HDEL', sw.i, id)
	end
	if not old then sw.n = sw.n + 1 end
	if not v then sw.n = sw.n - 1 end
	if oc then sw.c = sw.c - 1 end
	if nc then sw.c = sw.c + 1 end
	sw.w[N], sw.w[C] = sw.n, sw.c
	return added
end

-- expire removes the peers not heard from for EXPIRY and returns how many.
-- It looks only once the oldest could be that old: lo is never later than
-- any last-seen time in the table (announcing moves times forward,
-- and an announce from a clock behind moves lo back).
local function expire(sw)
	local lo = sw.meta[LO]
	if lo and lo > cutoff then return 0 end
	local gone = call('ZRANGEBYSCORE', sw.p, '-inf', cutoffStr())
	if #gone > 0 then
		call('ZREMRANGEBYSCORE', sw.p, '-inf', cutoffStr())
		for _, line in ipairs(gone) do
			setPeer(sw, lineID(line), lineRow(line), nil)
		end
	end
	-- An empty table keeps the lo it had: whoever joins it sets lo.
	local first = call('ZRANGE', sw.p, 0, 0, 'WITHSCORES')
	if first[2] then sw.w[LO] = num(first[2]) end
	return #gone
end

-- bucket returns the estimator's bucket, as a number and a string: the
-- current one, or the swarm's latest if that is later (a tracker whose
-- clock is behind), so that the window never moves back, as in memory.
local function bucket(sw)
	local hb = sw.w[HB] or sw.meta[HB]
	if hb and hb ~= curS then
		local b = tonumber(hb)
		if b > bucketN() then return b, hb end
	end
	return bucketN(), curS
end

-- counted notes that the estimator's window changed in bucket bS, when
-- its last estimate could still be taken (made in that bucket): see
-- estimate.
local function counted(sw, bS)
	local m, w = sw.meta, sw.w
	if (w[ESTB] or m[ESTB]) == bS then w[DN] = (w[DN] or m[DN] or 0) + 1 end
end

-- The estimator counts ids by linear counting (Whang et al., "A
-- linear-time probabilistic counting algorithm for database
-- applications", 1990): an id sets one bit of LEVEL_BITS, chosen by a
-- keyed hash of it, and n ids set about LEVEL_BITS * (1 - e^(-n /
-- LEVEL_BITS)) bits, which gives n back to within 1 % up to n = 3 *
-- LEVEL_BITS. One id in SAMPLE also sets a bit of a second level, which
-- counts on where the first fills up, to some 3 million ids. The levels
-- are the two halves of a string, so that merging buckets is one BITOP
-- OR, and counting them one BITCOUNT each, with no loop over bits or
-- registers in Lua (Redis's own HyperLogLogs keep small counts in a
-- sparse form that every PFADD searches and rewrites). It is more
-- accurate than the HyperLogLog the memory store keeps (3 %), and exact at
-- small counts but for ids that share a bit (15 in 16384 for 6 ids).
local LEVEL_BITS, LEVELS, SAMPLE = 16384, 2, 64
local LEVEL_BYTES = LEVEL_BITS / 8
-- A level is counted while less than this share of its bits is set
-- (about 3 * LEVEL_BITS ids).
local FULL = 0.95

-- count counts the id whose hash sets the bits at the offsets bits (see
-- estimatorKey.bits in estimator.go: one, or more separated by commas) in
-- the bucket. The first count in a bucket gives it its TTL, and renews the
-- swarm's.
local function count(sw, bits)
	local hb = sw.w[HB] or sw.meta[HB]
	local bS = hb
	if hb ~= curS then
		local _
		_, bS = bucket(sw)
	end
	local h = bucketKey(sw, bS)
	local more = string.find(bits, ',', 1, true)
	if call('SETBIT', h, more and string.sub(bits, 1, more - 1) or bits, 1) == 0 then
		counted(sw, bS)
	end
	if hb ~= bS then
		expiring(h)
		touch(sw)
		sw.w[HB] = bS
	end
	if more then
		for o in string.gmatch(string.sub(bits, more + 1), '%d+') do
			if call('SETBIT', h, o, 1) == 0 then counted(sw, bS) end
		end
	end
end

-- countBits returns the ids counted in the estimator's string at key v.
local function countBits(v)
	local scale = 1
	for level = 0, LEVELS - 1 do
		local set = call('BITCOUNT', v, level * LEVEL_BYTES, (level + 1) * LEVEL_BYTES - 1)
		if set < FULL * LEVEL_BITS or level == LEVELS - 1 then
			return -scale * LEVEL_BITS * math.log(1 - min(set, LEVEL_BITS - 1) / LEVEL_BITS)
		end
		scale = scale * SAMPLE
	end
end

-- estimate returns the distinct peers heard from over the last 1.5 to 2
-- intervals, less those that said stopped: the current bucket and the
-- three before, merged into a scratch key and counted. It is counted anew
-- when the window moved (every half interval), or the bucket gained bits
-- enough since for the estimate to be 1/16 off (a bit stands for one id
-- while few are set, for e^(n / LEVEL_BITS) ids once n are), or 16 for a
-- small one: an attacker could have many swarms overflow.
local function estimate(sw)
	local m = sw.meta
	local b, bS = bucket(sw)
	local est, dn = m[EST], sw.w[DN] or m[DN] or 0
	-- A bit newly set stands for e^(n / LEVEL_BITS) ids while the first
	-- level counts, and for SAMPLE times e^(n / (SAMPLE * LEVEL_BITS)) once
	-- the second does (past 3 * LEVEL_BITS ids).
	local per = est and (est < 3 * LEVEL_BITS and math.exp(est / LEVEL_BITS) or SAMPLE * math.exp(est / (SAMPLE * LEVEL_BITS)))
	if est and m[ESTB] == bS and dn * 16 * per < max(est, 16) then
		return est
	end
	local v = sw.base .. ':w'
	est = 0
	if call('BITOP', 'OR', v, bucketKey(sw, bS), bucketKey(sw, bucketS(b - 1)), bucketKey(sw, bucketS(b - 2)), bucketKey(sw, bucketS(b - 3))) > 0 then
		est = countBits(v)
		call('DEL', v)
	end
	local x = call('MGET', stops(sw, bS), stops(sw, bucketS(b - 1)), stops(sw, bucketS(b - 2)), stops(sw, bucketS(b - 3)))
	for j = 1, 4 do
		if x[j] then est = est - num(x[j]) end
	end
	est = max(0, est)
	sw.w[EST], sw.w[ESTB], sw.w[DN] = est, bS, 0
	return est
end

-- size estimates the peers in the swarm and the seeds among them: the
-- table's counts while it holds everyone, the estimator's once it
-- overflowed (within EXPIRY). With lastEstimate, the estimator's last
-- count is taken as it is, however old.
local function size(sw, lastEstimate)
	local n, c = sw.n, sw.c
	if n == 0 then return 0, 0 end
	local ovf = sw.w[OVF] or sw.meta[OVF]
	if not ovf or now - ovf >= EXPIRY then return n, c end
	local e = lastEstimate and (sw.meta[EST] or 0) or estimate(sw)
	local est = max(n, floor(e + 0.5))
	return est, floor(est * c / n + 0.5)
end

-- take appends line to out, unless it is asker's or among the lines out
-- holds past its first s0 values (a peer's line is the same string
-- wherever it comes from). Looking through the few taken costs less than
-- keeping a table of them.
local function take(out, s0, asker, line)
	if line == asker then return end
	local k = #out
	for j = s0 + 1, k do
		if out[j] == line then return end
	end
	out[k + 1] = line
end

-- takeRandom appends to out members of set (of at most size) at random,
-- as take, until out holds want lines past s0.
local function takeRandom(out, s0, asker, want, set, size)
	-- want+1 members leave want once the asker is out; those already
	-- taken come back too, so ask for them as well.
	local n = want + 1 + #out - s0
	if size >= 8 * n then
		-- From a set this much larger, draws that may repeat (in random
		-- order) cost Redis less than distinct members, and two more
		-- make up for repeats; the distinct ones below for more.
		for _, line in ipairs(call('SRANDMEMBER', set, -(n + 2))) do
			if #out - s0 >= want then return end
			take(out, s0, asker, line)
		end
		if #out - s0 >= want then return end
		n = want + 1 + #out - s0
	end
	local cand = call('SRANDMEMBER', set, n)
	shuffle(cand)
	for _, line in ipairs(cand) do
		if #out - s0 >= want then return end
		take(out, s0, asker, line)
	end
end

-- pickFirst appends to out up to want lines of seeds that accept
-- connections (at random), then of the latest arrivals that do, never the
-- line asker nor the id askerID (nil: none), each once, and returns how
-- many. (The asker's row read for the arrivals may be the one it had.)
local function pickFirst(sw, asker, askerID, want, out)
	local s0 = #out
	if sw.c > 0 then takeRandom(out, s0, asker, want, key(sw, 'rs'), sw.c) end
	-- Arrivals older than EXPIRY have all expired: no need to look.
	local arrivedAt = sw.w[ARR] or sw.meta[ARR]
	if #out - s0 < want and arrivedAt and now - arrivedAt < EXPIRY then
		local arr = call('LRANGE', key(sw, 'a'), 0, ARRIVALS - 1)
		if #arr > 0 then
			local infos = call('HMGET', sw.i, unpack(arr))
			for j, id in ipairs(arr) do
				if #out - s0 >= want then break end
				local v = infos[j]
				if v and id ~= askerID and reachable(v) then take(out, s0, asker, id .. '|' .. v) end
			end
		end
	end
	return #out - s0
end

-- pick appends to out up to want lines "id|complete|ip|port" of peers
-- that accept connections, never the line asker (nil: none): seeds first
-- (at random), then the latest arrivals, then others at random.
local function pick(sw, asker, want, out)
	local s0 = #out
	if pickFirst(sw, asker, nil, want, out) < want then
		takeRandom(out, s0, asker, want, key(sw, 'r'), sw.n)
	end
end

-- pickFor appends to out the peers for an announce of the peer whose line
-- is asker and id askerID, as pick would choose them but for the last
-- step: how many lines pickFirst took, those lines, then, should they be
-- fewer than want, other peers at random, as many as want, those taken
-- and the asker's lines in the set of reachable peers (askers, 0 or 1),
-- which the tracker shuffles and keeps, but the asker and those taken,
-- until it has want in all. Leaving that to the tracker spares Lua a loop
-- over them. It returns how many values it appended, and whether it drew
-- any from the set.
local function pickFor(sw, asker, askerID, want, askers, out)
	local k = #out
	out[k + 1] = 0
	local taken = pickFirst(sw, asker, askerID, want, out)
	out[k + 1] = taken
	local drew = false
	if taken < want then
		local others = call('SRANDMEMBER', key(sw, 'r'), want + taken + askers)
		local n = #out
		for j = 1, #others do
			out[n + j] = others[j]
		end
		drew = #others > 0
	end
	return #out - k, drew
end

-- cached returns the list picked for nobody in particular, refreshed at
-- most once per GAP; the tracker leaves the asker out.
local function cached(sw)
	local m = call('HMGET', sw.i, 'cache', 'cat')
	local cat = num(m[2])
	if m[1] and cat and now >= cat and now - cat < GAP then return m[1] end
	local picked = {}
	pick(sw, nil, CACHED, picked)
	local list = table.concat(picked, '\n')
	sw.w[CACHE], sw.w[CAT] = list, now
	flush(sw)
	return list
end
