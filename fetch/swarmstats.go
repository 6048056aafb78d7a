package fetch

import (
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/node"
)

// SwarmStats returns the counters of the download's swarm node (bytes from
// and to peers, peers seen...), from any goroutine: nil before the node
// started or for a download outside a swarm.
func (d *Download) SwarmStats() *node.Stats {
	nd := d.peer.Load()
	if nd == nil {
		return nil
	}
	st := nd.Stats()
	return &st
}

// Private reports whether the download's swarm is private: its node was
// admitted with a token, which a seed of the file later needs anew
// (Join), since a token expires.
func (d *Download) Private() bool { return d.isPrivate.Load() }

// Manifest is the file's manifest once the download has joined its swarm
// (with its piece layer once the node knows it), nil before or outside a
// swarm.
func (d *Download) Manifest() *manifest.Manifest {
	nd := d.peer.Load()
	if nd == nil {
		return nil
	}
	return nd.Manifest()
}
