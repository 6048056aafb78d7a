
-- stats: drops the idle swarms and the expired peers, and returns {swarms,
-- peers, estimated peers, peers expired, swarms idle}. Its work grows with
-- the swarms kept, which maxSwarms bounds.
local idle = dropIdle(-1)
local names = redis.call('ZRANGE', reg, 0, -1)
local peers, estimated, expired = 0, 0, 0
for _, name in ipairs(names) do
	local sw = open(name)
	readMeta(sw)
	expired = expired + expire(sw)
	peers = peers + sw.n
	estimated = estimated + size(sw)
	flush(sw)
end
return { #names, peers, estimated, expired, idle }
