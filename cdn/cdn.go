// Package cdn is stampede's CDN mode, "stampede cdn": cache nodes that
// cooperate as CoDeeN's and CoBlitz's did, so a cluster of them fetches each
// file from its origin about once however many clients ask.
//
// Any node answers any client, by URL prefix (GET /http://origin/path) or
// as a reverse proxy for configured origins (by Host). A file travels as
// chunks: the pieces of its manifest when the origin publishes one (every
// chunk verified), fixed byte ranges otherwise (the validators checked on
// every range, the whole file against Repr-Digest when the origin gives
// one). Each chunk has an owner among the healthy nodes, by rendezvous
// hashing with bounded loads (hrw.go); only the owner fetches a chunk from
// the origin, once however many ask at once (collapsed forwarding), the
// others fetch it from the owner, a slow owner is bypassed for the next
// node in the chunk's order (re-forwarding), and the overflow of a hot
// chunk makes its runners-up replicas. The node a client reached streams
// it the file in order, fetching a congestion-controlled window of chunks
// at once (window.go), as CoBlitz's agent did.
//
// Files: cdn.go (Config, Node, routing), hrw.go (owners), members.go
// (heartbeats' verdicts and peer choice), window.go (the agent's window and
// deadlines), access.go (who may ask what), meta.go (a file's description
// and HTTP caching rules), chunk.go (getting one chunk), agent.go (answering
// a client), store.go (the on-disk cache), metrics.go (metrics, status).
package cdn
