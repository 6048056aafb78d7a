
-- stats: drops the idle swarms and the expired peers, and returns {swarms,
-- peers, estimated peers, peers expired, swarms idle}. Its work grows with
-- the swarms kept, which maxSwarms bounds.
local idle = dropIdle(-1)
local names = redis.call('ZRANGE', reg, 0, -1)
local peers, estimated, expired = 0, 0, 0
for _, name in ipairs(names) do
	local sw = keys(name)
	expired = expired + expire(sw)
	peers = peers + redis.call('ZCARD', sw.p)
	estimated = estimated + size(sw)
end
return { #names, peers, estimated, expired, idle }
