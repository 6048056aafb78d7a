//go:build !unix

package store

// NoFollow and NonBlock have no equivalent here.
const (
	NoFollow = 0
	NonBlock = 0
)
