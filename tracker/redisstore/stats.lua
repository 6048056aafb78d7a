
-- stats: drops the idle swarms and the expired peers, and returns {swarms,
-- peers, estimated peers, peers expired, swarms idle}. Its work grows with
-- the swarms kept, which maxSwarms bounds.
local function stats(args)
	setup(args)
	local idle = dropIdle(-1)
	local names = call('ZRANGE', reg, 0, -1)
	local peers, estimated, expired = 0, 0, 0
	for _, name in ipairs(names) do
		local sw = open(name)
		readMeta(sw)
		expired = expired + expire(sw)
		peers = peers + sw.n
		-- The estimates as last made: recounting every swarm that overflowed
		-- would hold Redis a millisecond per swarm, for each scrape.
		estimated = estimated + size(sw, true)
		flush(sw)
	end
	return { #names, peers, estimated, expired, idle }
end
