-- The tracker's swarms in Redis: the common part of the three scripts
-- (announce.lua, peers.lua, stats.lua are appended to it). Each script runs
-- atomically, so replicas sharing a Redis never see half an announce.
-- redisstore.go documents the key layout; package tracker's swarm.go is
-- the in-memory version of the same decisions, and the conformance suite
-- (package storetest) holds both to the same behaviour.
--
-- Times are milliseconds since the epoch, passed in by the tracker (no
-- script reads Redis's clock, so tests can drive the time). Key TTLs are
-- only there to collect what a crash left: every decision uses the times
-- stored in scores and fields.
--
-- ARGV[1] now, ARGV[2] the interval (ms), ARGV[3] the key prefix,
-- ARGV[4] the keys' TTL (ms), ARGV[5] a random seed in [1, 2^31-2],
-- ARGV[6] now less the expiry (3 intervals), ARGV[7] the current
-- estimator bucket (now / half an interval): decimal integers, made by the
-- tracker. Redis turns a Lua number into a string with a printf and a
-- string into a number with a strtod, which cost a script more than most
-- of the commands it calls: the times go to Redis as the strings given,
-- and fields are written only when they change.

local ttl = ARGV[4]
local interval = tonumber(ARGV[2])
local prefix = ARGV[3]
local nowS, now, seed, cutoffS, cutoff, curS, cur
local EXPIRY -- a peer, or a swarm, silent this long is gone

-- at sets the time the decisions are taken at, and the random seed, as
-- ARGV[1], [5], [6], [7] give them: announce.lua, which takes several
-- announces in one call, sets each one's own before it.
local function at(nowArg, seedArg, cutoffArg, curArg)
	nowS, cutoffS, curS = nowArg, cutoffArg, curArg
	now, seed, cutoff, cur = tonumber(nowS), tonumber(seedArg), tonumber(cutoffS), tonumber(curS)
	EXPIRY = now - cutoff
end
at(ARGV[1], ARGV[5], ARGV[6], ARGV[7])

local GAP = 1000            -- minAnnounceGap
local ARRIVALS = 16         -- arrivalRing
local DEPARTURES = 64       -- stoppedRing
local CACHED = 51           -- MaxNumWant+1: the cached list, for anyone
local KEPT_BUCKETS = 7      -- buckets a key's TTL may still keep alive
local PAD = string.rep('-', 80) -- longer than hash-max-listpack-value

local reg = prefix .. 'swarms'

-- Park-Miller: exact in Lua's doubles, and seeded by the caller (Redis
-- seeds math.random the same way for every script).
local function rnd(n)
	seed = (seed * 16807) % 2147483647
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

-- open returns the keys of the swarm named name ("<root hex>:<size>");
-- readMeta reads its fields once (meta), flush writes those set in w.
local function open(name)
	local b = prefix .. '{' .. name .. '}'
	return {
		name = name, base = b,
		p = b .. ':p',   -- ZSET id -> last seen: the table
		i = b .. ':i',   -- HASH id -> "complete|ip|port", and the swarm's
		                 -- fields (META, cache, cat)
		rs = b .. ':rs', -- SET "id|complete|ip|port" of reachable seeds
		r = b .. ':r',   -- SET "id|complete|ip|port" of reachable peers
		a = b .. ':a',   -- LIST latest arrivals, newest first
		d = b .. ':d',   -- ZSET "id|ip" -> when it said stopped
		w = {},
	}
end

-- The swarm's fields, kept in its hash next to the peers' (whose names,
-- hex ids, are longer): n and c the table's size and seeds, tt when the
-- TTLs were renewed, ovf the last overflow, est, estb, esta, dn the
-- estimate and when it was made, arr the last arrival, lo a time no peer
-- in the table was seen before (expiry has nothing to do until then), hb
-- the estimator bucket last given a TTL, k the key of the estimator's
-- hash of ids. The last two are kept as strings.
local META = { 'n', 'c', 'tt', 'ovf', 'est', 'estb', 'esta', 'dn', 'arr', 'lo', 'hb', 'k' }
local NMETA = #META

-- readMeta reads the swarm's fields (not the cached list) and, given an
-- id, that peer's row, in one call.
local function readMeta(sw, id)
	local v
	if id then
		v = redis.call('HMGET', sw.i, 'n', 'c', 'tt', 'ovf', 'est', 'estb', 'esta', 'dn', 'arr', 'lo', 'hb', 'k', id)
	else
		v = redis.call('HMGET', sw.i, 'n', 'c', 'tt', 'ovf', 'est', 'estb', 'esta', 'dn', 'arr', 'lo', 'hb', 'k')
	end
	local m = {}
	for j = 1, NMETA - 2 do
		if v[j] then m[META[j]] = num(v[j]) end
	end
	m.hb, m.k = v[NMETA - 1], v[NMETA]
	m.made = v[1] and true
	sw.meta = m
	-- Every change to the table goes through setPeer, which keeps these.
	sw.n, sw.c = m.n or 0, m.c or 0
	return v[NMETA + 1]
end

-- expiring gives a key just written the TTL, should the write have made it.
local function expiring(k) redis.call('PEXPIRE', k, ttl) end

-- flush writes the fields set in sw.w that changed, in one call; now
-- and the current bucket go as the strings given.
local function flush(sw)
	local args, m = {}, sw.meta
	for f, v in pairs(sw.w) do
		if m[f] ~= v then
			args[#args + 1] = f
			args[#args + 1] = (v == now and nowS) or (v == cur and curS) or v
			m[f] = v
		end
	end
	sw.w = {}
	if #args == 0 then return end
	redis.call('HSET', sw.i, unpack(args))
	-- A swarm's hash is made with its first peer, which gives it the TTL;
	-- should fields come first, they do.
	if not m.made then
		m.made = true
		expiring(sw.i)
	end
end

local function hll(sw, b) return sw.base .. ':h:' .. (b == cur and curS or string.format('%d', b)) end
local function stops(sw, b) return sw.base .. ':x:' .. (b == cur and curS or string.format('%d', b)) end

local function drop(sw)
	local ks = { sw.p, sw.i, sw.rs, sw.r, sw.a, sw.d }
	for j = 0, KEPT_BUCKETS - 1 do
		ks[#ks + 1] = hll(sw, cur - j)
		ks[#ks + 1] = stops(sw, cur - j)
	end
	redis.call('DEL', unpack(ks))
end

-- touch renews the TTL of every key of the swarm once an interval (and a
-- key written since is given one by its writer: expiring writes it).
local function touch(sw)
	local tt = sw.meta.tt
	if tt and now >= tt and now - tt < interval then return end
	sw.w.tt = now
	flush(sw)
	for _, k in ipairs({ sw.p, sw.i, sw.rs, sw.r, sw.a, sw.d }) do
		redis.call('PEXPIRE', k, ttl)
	end
end

-- dropIdle drops up to max swarms no one announced to for EXPIRY.
local function dropIdle(max)
	local idle = redis.call('ZRANGEBYSCORE', reg, '-inf', cutoffS, 'LIMIT', 0, max)
	for _, name in ipairs(idle) do
		drop(open(name))
		redis.call('ZREM', reg, name)
	end
	return #idle
end

local function info(v)
	local c, ip, port = string.match(v, '^(%d)|(.*)|(%d+)$')
	return c, ip, port
end

-- setPeer records that the peer id, in the table with the info old ("c|ip|
-- port", or nil if it was not), now has the info v (nil: it is gone):
-- its row, the sets it is picked from, the counts. The caller keeps the
-- ZSET of the table.
local function setPeer(sw, id, old, v)
	if old == v then return end
	local oc, nc, oport, nport, _ = '0', '0', '0', '0', nil
	if old then oc, _, oport = info(old) end
	if v then nc, _, nport = info(v) end
	if old and oport ~= '0' then
		redis.call('SREM', sw.r, id .. '|' .. old)
		if oc == '1' then redis.call('SREM', sw.rs, id .. '|' .. old) end
	end
	if v and nport ~= '0' then
		redis.call('SADD', sw.r, id .. '|' .. v)
		expiring(sw.r)
		if nc == '1' then
			redis.call('SADD', sw.rs, id .. '|' .. v)
			expiring(sw.rs)
		end
	end
	if v then
		if not old and sw.n == 0 then
			-- The first peer: the hash also gets a field longer than
			-- Redis keeps in a compact (listpack) hash, whose lookups
			-- scan every field, so that it is a hash table from the start.
			redis.call('HSET', sw.i, id, v, '~', PAD)
			expiring(sw.i)
			sw.meta.made = true
		else
			redis.call('HSET', sw.i, id, v)
		end
	else
		redis.call('HDEL', sw.i, id)
	end
	if not old then sw.n = sw.n + 1 end
	if not v then sw.n = sw.n - 1 end
	if oc == '1' then sw.c = sw.c - 1 end
	if nc == '1' then sw.c = sw.c + 1 end
	sw.w.n, sw.w.c = sw.n, sw.c
end

-- expire removes the peers not heard from for EXPIRY and returns how many.
-- It looks only once the oldest could be that old: lo is never later than
-- any last-seen time in the table (announcing moves times forward,
-- and an announce from a clock behind moves lo back).
local function expire(sw)
	local lo = sw.meta.lo
	if lo and lo > cutoff then return 0 end
	local gone = redis.call('ZRANGEBYSCORE', sw.p, '-inf', cutoffS)
	if #gone > 0 then
		redis.call('ZREMRANGEBYSCORE', sw.p, '-inf', cutoffS)
		local infos = redis.call('HMGET', sw.i, unpack(gone))
		for j, id in ipairs(gone) do
			if infos[j] then setPeer(sw, id, infos[j], nil) end
		end
	end
	-- An empty table keeps the lo it had: whoever joins it sets lo.
	local first = redis.call('ZRANGE', sw.p, 0, 0, 'WITHSCORES')
	if first[2] then sw.w.lo = num(first[2]) end
	return #gone
end

-- counted notes that the estimator's registers changed, when its last
-- estimate could still be taken (made in this bucket): see estimate.
local function counted(sw)
	local m, w = sw.meta, sw.w
	local estb = w.estb or m.estb
	if estb and estb >= cur then w.dn = (w.dn or m.dn or 0) + 1 end
end

-- estimate returns the distinct peers heard from over the last 1.5 to 2
-- intervals, less those that said stopped. It is recomputed when the
-- window moved (every half interval), or its registers changed more than
-- 1/16 of the last estimate times (or 16 times, for a small one) since:
-- merging the buckets is the costliest call a script makes, and an
-- attacker could have many swarms overflow.
local function estimate(sw)
	local m = sw.meta
	local est, dn = m.est, sw.w.dn or m.dn or 0
	if est and m.estb == cur and now >= m.esta and dn * 16 < math.max(est, 16) then
		return est
	end
	local hs, xs = {}, {}
	for j = 0, 3 do
		hs[#hs + 1] = hll(sw, cur - j)
		xs[#xs + 1] = stops(sw, cur - j)
	end
	-- Merged into a scratch key and counted, rather than counted at once
	-- (PFCOUNT of several keys): in-process Redises for tests add up
	-- the counts of the keys instead of counting their union.
	local w = sw.base .. ':w'
	redis.call('DEL', w)
	redis.call('PFMERGE', w, unpack(hs))
	est = redis.call('PFCOUNT', w)
	redis.call('DEL', w)
	for _, v in ipairs(redis.call('MGET', unpack(xs))) do
		if v then est = est - num(v) end
	end
	est = math.max(0, est)
	sw.w.est, sw.w.estb, sw.w.esta, sw.w.dn = est, cur, now, 0
	return est
end

-- size estimates the peers in the swarm and the seeds among them: the
-- table's counts while it holds everyone, the estimator's once it
-- overflowed (within EXPIRY). With lastEstimate, the estimator's last
-- count is taken as it is, however old.
local function size(sw, lastEstimate)
	local n, c = sw.n, sw.c
	if n == 0 then return 0, 0 end
	local ovf = sw.w.ovf or sw.meta.ovf
	if not ovf or now - ovf >= EXPIRY then return n, c end
	local e = lastEstimate and (sw.meta.est or 0) or estimate(sw)
	local est = math.max(n, math.floor(e + 0.5))
	return est, math.floor(est * c / n + 0.5)
end

-- pick chooses up to want peers that accept connections, never asker:
-- seeds first (at random), then the latest arrivals, then others at
-- random. It returns them as lines "id|complete|ip|port".
local function pick(sw, asker, want)
	local out, chosen = {}, {}
	local function takeRandom(set)
		-- want+1 distinct members leave want once the asker is out;
		-- those already taken come back too, so ask for them as well.
		local cand = redis.call('SRANDMEMBER', set, want + 1 + #out)
		shuffle(cand)
		for _, line in ipairs(cand) do
			if #out >= want then return end
			local id = string.sub(line, 1, 32)
			if not chosen[id] and id ~= asker then
				chosen[id] = true
				out[#out + 1] = line
			end
		end
	end
	if sw.c > 0 then takeRandom(sw.rs) end
	-- Arrivals older than EXPIRY have all expired: no need to look.
	local arrivedAt = sw.w.arr or sw.meta.arr
	if #out < want and arrivedAt and now - arrivedAt < EXPIRY then
		local arr = redis.call('LRANGE', sw.a, 0, ARRIVALS - 1)
		if #arr > 0 then
			local infos = redis.call('HMGET', sw.i, unpack(arr))
			for j, id in ipairs(arr) do
				if #out >= want then break end
				local v = infos[j]
				if v and not chosen[id] and id ~= asker and string.sub(v, -2) ~= '|0' then
					chosen[id] = true
					out[#out + 1] = id .. '|' .. v
				end
			end
		end
	end
	if #out < want then takeRandom(sw.r) end
	return table.concat(out, '\n')
end

-- cached returns the list picked for nobody in particular, refreshed at
-- most once per GAP; the tracker leaves the asker out.
local function cached(sw)
	local m = redis.call('HMGET', sw.i, 'cache', 'cat')
	local cat = num(m[2])
	if m[1] and cat and now >= cat and now - cat < GAP then return m[1] end
	local list = pick(sw, '', CACHED)
	sw.w.cache, sw.w.cat = list, now
	flush(sw)
	return list
end
