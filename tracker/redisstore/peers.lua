
-- peers: ARGV[8] the swarm's name. Returns {} when there is no such swarm,
-- else {swarm size, complete, peers expired, the cached list}. It neither
-- adds anyone nor marks the swarm announced.
local sw = open(ARGV[8])
if not redis.call('ZSCORE', reg, sw.name) then return {} end
readMeta(sw)
local expired = expire(sw)
local list = cached(sw)
local n, c = size(sw, true)
flush(sw)
return { n, c, expired, list }
