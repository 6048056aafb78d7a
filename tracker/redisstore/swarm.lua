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
-- ARGV[4] the keys' TTL (ms), ARGV[5] a random seed in [1, 2^31-2].

local now = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local prefix = ARGV[3]
local ttl = tonumber(ARGV[4])
local seed = tonumber(ARGV[5])

local EXPIRY = 3 * interval -- a peer, or a swarm, silent this long is gone
local GAP = 1000            -- minAnnounceGap
local ARRIVALS = 16         -- arrivalRing
local DEPARTURES = 64       -- stoppedRing
local CACHED = 51           -- MaxNumWant+1: the cached list, for anyone
local WIDTH = math.floor(interval / 2) -- of an estimator bucket
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

local function bucket(t) return math.floor(t / WIDTH) end

-- open returns the keys of the swarm named name ("<root hex>:<size>"),
-- with the fields of its meta hash read once (m) and those to write once
-- at the end (w, by flush).
local function open(name)
	local b = prefix .. '{' .. name .. '}'
	return {
		name = name, base = b,
		p = b .. ':p',   -- ZSET id -> last seen: the table
		i = b .. ':i',   -- HASH id -> "complete|ip|port"
		rs = b .. ':rs', -- SET "id|complete|ip|port" of reachable seeds
		r = b .. ':r',   -- SET "id|complete|ip|port" of reachable peers
		a = b .. ':a',   -- LIST latest arrivals, newest first
		d = b .. ':d',   -- ZSET "id|ip" -> when it said stopped
		m = b .. ':m',   -- HASH n, c, tt, ovf, est, estb, esta, dn, arr,
		                 -- cache, cat
		w = {},
	}
end

local META = { 'n', 'c', 'tt', 'ovf', 'est', 'estb', 'esta', 'dn', 'arr' }

-- readMeta reads the meta fields the decisions need (not the cached list).
local function readMeta(sw)
	local v = redis.call('HMGET', sw.m, unpack(META))
	sw.meta = {}
	for j, f in ipairs(META) do sw.meta[f] = num(v[j]) end
	-- The table's size and its seeds, kept here to spare two calls an
	-- announce; every change to the table goes through add and remove.
	sw.n, sw.c = sw.meta.n or 0, sw.meta.c or 0
end

-- flush writes the meta fields set in sw.w, in one call.
local function flush(sw)
	local args = {}
	for f, v in pairs(sw.w) do
		args[#args + 1] = f
		args[#args + 1] = v
	end
	if #args > 0 then redis.call('HSET', sw.m, unpack(args)) end
	sw.w = {}
end

local function hll(sw, b) return sw.base .. ':h:' .. string.format('%d', b) end
local function stops(sw, b) return sw.base .. ':x:' .. string.format('%d', b) end

local function drop(sw)
	local cur = bucket(now)
	local ks = { sw.p, sw.i, sw.rs, sw.r, sw.a, sw.d, sw.m }
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
	for _, k in ipairs({ sw.p, sw.i, sw.rs, sw.r, sw.a, sw.d }) do
		redis.call('PEXPIRE', k, ttl)
	end
	sw.w.tt = now
	flush(sw)
	redis.call('PEXPIRE', sw.m, ttl)
end

-- expiring gives a key just written the TTL, should the write have made it.
local function expiring(k) redis.call('PEXPIRE', k, ttl) end

-- dropIdle drops up to max swarms no one announced to for EXPIRY.
local function dropIdle(max)
	local idle = redis.call('ZRANGEBYSCORE', reg, '-inf', now - EXPIRY, 'LIMIT', 0, max)
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
local function expire(sw)
	local gone = redis.call('ZRANGEBYSCORE', sw.p, '-inf', now - EXPIRY)
	if #gone > 0 then
		redis.call('ZREMRANGEBYSCORE', sw.p, '-inf', now - EXPIRY)
		local infos = redis.call('HMGET', sw.i, unpack(gone))
		for j, id in ipairs(gone) do
			if infos[j] then setPeer(sw, id, infos[j], nil) end
		end
	end
	return #gone
end

-- estimate returns the distinct peers heard from over the last 1.5 to 2
-- intervals, less those that said stopped. It is recomputed when the
-- window moved (every half interval), or its registers changed more than
-- 1/16 of the last estimate times (or 16 times, for a small one) since:
-- merging the buckets is the costliest call a script makes, and an
-- attacker could have many swarms overflow.
local function estimate(sw)
	local cur = bucket(now)
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
	m.est, m.estb, m.esta, m.dn = est, cur, now, 0
	sw.w.est, sw.w.estb, sw.w.esta, sw.w.dn = est, string.format('%d', cur), now, 0
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
	local m = redis.call('HMGET', sw.m, 'cache', 'cat')
	local cat = num(m[2])
	if m[1] and cat and now >= cat and now - cat < GAP then return m[1] end
	local list = pick(sw, '', CACHED)
	sw.w.cache, sw.w.cat = list, now
	flush(sw)
	expiring(sw.m)
	return list
end
