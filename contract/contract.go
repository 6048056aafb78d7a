// Package contract is the HTTP contract between a stampede origin and its
// clients (stampede get, the gateway, the daemon, a CDN node): the header
// names, the well-known paths, the Link relations, and the encodings of
// what travels in them (the bundle index, the lists of pieces and peers,
// the manifest head). Package origin serves it, package originclient
// speaks it as a client; neither defines a name of its own for it.
//
// A file P served by an origin is a plain HTTP resource (Range, If-Range,
// ETag, Last-Modified, HEAD) with these additions:
//
//	Request header           Meaning
//	Stampede-Want            manifest-head: put the manifest's head in the answer to this HEAD
//	Stampede-Capabilities    overload: past its limits, answer with a piece of your choosing and peers
//	Stampede-Candidates      other pieces the client would take instead of its Range ("3,7-9")
//	Stampede-Reason          why the client asks (piece, retry-late, stream, origin:no-peers, ...)
//	Stampede-Peer-Key        the client's peer key, for a private swarm's token (with a manifest request)
//	Stampede-Suppliers       how many neighbours delivered the swarm client a piece; 0: it downloads alone
//
//	Response header          Meaning
//	Link                     <ManifestPrefix/P>; rel="stampede-manifest", and for a page
//	                         <BundlePrefix/P>; rel="stampede-bundle"
//	Stampede-Manifest-Head   the manifest's head, base64 of its JSON (HEAD with Stampede-Want)
//	Stampede-Piece           the piece a 206 carries when it is not the one asked
//	Stampede-Root            the root of the manifest that piece belongs to (overload answer)
//	Stampede-Peers           peers of the file's swarm, "ip:port, ip:port"
//	Stampede-In-Swarm        a 503: every piece offered was just sent to other peers
//	Stampede-Budget          the file's egress budget left this window, to a swarm client; with
//	                         "spent", a 503: the budget is spent and the pieces asked went out
//	Stampede-Signature       the origin's signature of the file's root and size (with the manifest)
//	Stampede-Key             the signing origin's public key (with the signature)
//	Stampede-Token           a private swarm's token for the Stampede-Peer-Key's peer (with the manifest)
//	Stampede-Private         "1": the swarm is private (with the manifest)
//
// An overload answer is a 206 with Stampede-Piece and a Retry-After; a pick
// answer (a candidate sent instead of the piece asked) is a 206 with
// Stampede-Piece and no Retry-After. The manifest of P is at
// ManifestPrefix/P, its head at the same URL with ManifestHeadQuery=0. The
// bundle of a page P is at BundlePrefix/P and its index (BundleIndex) at
// BundleIndexPrefix/P. The tracker an origin embeds answers at
// tracker.WellKnownPath, and every stampede server answers its health
// checks at HealthzPath and ReadyzPath. docs/architecture.md tells the
// whole exchange.
package contract

import (
	"net/url"
	"strings"
)

// Well-known paths. Each is followed by "/" and the file's path on the
// origin (without its leading "/").
const (
	// WellKnownPrefix is the root of everything stampede adds to an origin.
	WellKnownPrefix = "/.well-known/stampede"
	// ManifestPrefix is where a file's manifest is served: the manifest of
	// /dir/file.iso is at /.well-known/stampede/manifest/dir/file.iso.
	ManifestPrefix = WellKnownPrefix + "/manifest"
	// BundlePrefix is where the bundle of a page is served: the page and
	// its same-origin assets in one resource, served like any file.
	BundlePrefix = WellKnownPrefix + "/bundle"
	// BundleIndexPrefix is where the index of a page's bundle is served
	// (BundleIndex, as JSON).
	BundleIndexPrefix = WellKnownPrefix + "/bundle-index"
)

// Health paths, the same on every stampede server (the origin, the
// tracker, the gateway, the daemon's API). They sit under WellKnownPrefix so
// that they shadow no path of a site the origin serves or fronts. Both
// answer GET with a line of plain text.
const (
	// HealthzPath answers 200 while the process serves HTTP at all: a
	// liveness check, which only a restart can fix when it fails.
	HealthzPath = WellKnownPrefix + "/healthz"
	// ReadyzPath answers 200 when the server can do its work (the origin's
	// directory readable, the tracker's store answering) and 503 naming
	// what cannot when it cannot: a readiness check, for a load balancer
	// to send the traffic elsewhere meanwhile.
	ReadyzPath = WellKnownPrefix + "/readyz"
)

// Link relations, in the Link header of a file's responses.
const (
	// ManifestRel names the file's manifest.
	ManifestRel = "stampede-manifest"
	// BundleRel names the bundle of a page.
	BundleRel = "stampede-bundle"
)

// Header names and their tokens.
const (
	// CapabilitiesHeader is the request header in which a client lists, as
	// comma-separated tokens, what it can take beyond plain HTTP.
	CapabilitiesHeader = "Stampede-Capabilities"
	// CapabilityOverload is the token that says: past your limits, answer
	// me with a piece of your choosing and peers; I fetch the rest from the
	// swarm.
	CapabilityOverload = "overload"
	// PieceHeader names the piece a 206 carries when the origin chose it:
	// an overload answer (with Retry-After) or a pick among the request's
	// candidates (without).
	PieceHeader = "Stampede-Piece"
	// PeersHeader lists peers of the file's swarm (FormatPeers), in
	// overload answers and in the 503s capable clients get.
	PeersHeader = "Stampede-Peers"
	// RootHeader is the root (hex) of the manifest an overload answer's
	// piece belongs to.
	RootHeader = "Stampede-Root"
	// CandidatesHeader lists the pieces a request would take instead of the
	// one its Range asks for (FormatCandidates).
	CandidatesHeader = "Stampede-Candidates"
	// InSwarmHeader marks a 503 that says "the pieces you would take were
	// all sent just now: get them from the swarm".
	InSwarmHeader = "Stampede-In-Swarm"
	// ReasonHeader is the request header in which a client says why it
	// asks the origin for a file's bytes (the Reason constants); the
	// origin counts its file requests by it.
	ReasonHeader = "Stampede-Reason"
	// WantHeader is the request header of a HEAD asking for more than the
	// headers of the file: the token WantManifestHead.
	WantHeader = "Stampede-Want"
	// WantManifestHead asks for the manifest's head in ManifestHeadHeader.
	WantManifestHead = "manifest-head"
	// ManifestHeadHeader carries the manifest's head (EncodeManifestHead)
	// in the answer to a HEAD with WantHeader, when the origin knows the
	// manifest already.
	ManifestHeadHeader = "Stampede-Manifest-Head"
	// ManifestHeadQuery is the query parameter that, set to 0, asks a
	// manifest URL for the manifest's head instead of the whole manifest
	// (ManifestHeadURL).
	ManifestHeadQuery = "piece_layer"

	// SignatureHeader carries the origin's signature of the file's root
	// and size (sign.SignManifest), on the answers that carry its
	// manifest or manifest head, when the origin signs (serve
	// --sign-key). A client given the origin's key refuses a manifest
	// without it.
	SignatureHeader = "Stampede-Signature"
	// KeyHeader carries the signing origin's public key, in its one-line
	// form (sign.FormatPublicKey), next to SignatureHeader: what a client
	// not given a key checks a private swarm's tokens with.
	KeyHeader = "Stampede-Key"
	// PeerKeyHeader is the request header in which a client names its
	// peer key (an ed25519 public key, one-line form) when it asks for a
	// manifest, so that a private swarm's origin answers with a token for
	// the key's peer ID (sign.PeerIDOf).
	PeerKeyHeader = "Stampede-Peer-Key"
	// TokenHeader carries the token (sign.Token, its text form) that
	// admits the peer of the key PeerKeyHeader named to a private swarm,
	// on the answers that carry the manifest or its head.
	TokenHeader = "Stampede-Token"
	// PrivateHeader, "1" on the answers that carry a manifest or its
	// head, says the file's swarm is private: a client without a token
	// for it fetches from the origin only.
	PrivateHeader = "Stampede-Private"
)

// Reasons a client gives in ReasonHeader. A swarm peer's origin fetch is
// ReasonOriginPrefix followed by the scheduler's reason (swarm.Reason*).
const (
	ReasonPiece        = "piece"       // a piece, first try
	ReasonRetryLate    = "retry-late"  // a piece asked again: the first request is late
	ReasonRetryError   = "retry-error" // a piece asked again after a failure
	ReasonStream       = "stream"      // the whole file (or its rest) in one stream
	ReasonOriginPrefix = "origin:"     // a swarm peer's fetch, then the scheduler's reason
)

// Link is the value of a Link header pointing at target with relation rel.
func Link(target, rel string) string {
	return "<" + target + `>; rel="` + rel + `"`
}

// ManifestPath is the escaped URL path of the manifest of the file at URL
// path p ("/dir/file.iso", not escaped).
func ManifestPath(p string) string {
	return (&url.URL{Path: ManifestPrefix + p}).EscapedPath()
}

// BundlePath is the escaped URL path of the bundle of the page at URL path
// p ("/dir/index.html", not escaped).
func BundlePath(p string) string {
	return (&url.URL{Path: BundlePrefix + p}).EscapedPath()
}

// BundleIndexPath is the escaped URL path of the index of the bundle at
// the escaped URL path bundle, and false when bundle is not under
// BundlePrefix.
func BundleIndexPath(bundle string) (string, bool) {
	rest, ok := strings.CutPrefix(bundle, BundlePrefix+"/")
	if !ok {
		return "", false
	}
	return BundleIndexPrefix + "/" + rest, true
}
