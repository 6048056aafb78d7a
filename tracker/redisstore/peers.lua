
-- peers: args[7] the swarm's name. Returns {} when there is no such swarm,
-- else {swarm size, complete, peers expired, the cached list}. It neither
-- adds anyone nor marks the swarm announced.
local function peers(args)
	setup(args)
	local sw = open(args[7])
	if not call('ZSCORE', reg, sw.name) then return {} end
	readMeta(sw)
	local expired = expire(sw)
	local list = cached(sw)
	local n, c = size(sw, true)
	flush(sw)
	return { n, c, expired, list }
end
