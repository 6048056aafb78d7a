package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/bits"
)

// BlockSize is the leaf size of the merkle tree, fixed by BEP 52.
const BlockSize = 16 << 10

// Hash is a SHA-256 digest: a tree node, a piece hash or a root.
type Hash [sha256.Size]byte

// String returns the hash in lowercase hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the all-zero padding hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// MarshalText encodes h as hex, so hashes read well in JSON.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes 64 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	p, err := ParseHash(string(b))
	if err != nil {
		return err
	}
	*h = p
	return nil
}

// ParseHash decodes a hash written as 64 hex digits.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("manifest: hash %q: want %d hex digits, got %d", abbrev(s), 2*len(h), len(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("manifest: hash %q: %w", abbrev(s), err)
	}
	return h, nil
}

func abbrev(s string) string {
	if len(s) > 20 {
		return s[:20] + "..."
	}
	return s
}

// hashPair returns the parent of two nodes.
func hashPair(l, r Hash) Hash {
	var buf [2 * sha256.Size]byte
	copy(buf[:], l[:])
	copy(buf[sha256.Size:], r[:])
	return sha256.Sum256(buf[:])
}

// padHash returns the root of a subtree of n all-padding leaves (n a power of
// two). BEP 52 pads leaves with zero hashes; inner padding nodes are the hashes
// of their padding children.
func padHash(n int) Hash {
	var h Hash
	for ; n > 1; n /= 2 {
		h = hashPair(h, h)
	}
	return h
}

// nextPow2 returns the smallest power of two >= n (1 for n <= 1).
func nextPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// merkleRoot reduces a layer of nodes to its root, padding the layer to
// width leaves (a power of two >= len(layer)) with subtrees whose root is pad.
// It reuses layer's storage.
func merkleRoot(layer []Hash, width int, pad Hash) Hash {
	if len(layer) == 0 {
		return Hash{}
	}
	for width > 1 {
		n := (len(layer) + 1) / 2
		for i := 0; i < n; i++ {
			l := layer[2*i]
			r := pad
			if 2*i+1 < len(layer) {
				r = layer[2*i+1]
			}
			layer[i] = hashPair(l, r)
		}
		layer = layer[:n]
		pad = hashPair(pad, pad)
		width /= 2
	}
	return layer[0]
}

// blockHashes appends the leaf hashes of data, cut into 16 KiB blocks (the last
// may be short), to dst.
func blockHashes(dst []Hash, data []byte) []Hash {
	for len(data) > 0 {
		n := min(len(data), BlockSize)
		dst = append(dst, sha256.Sum256(data[:n]))
		data = data[n:]
	}
	return dst
}

// subtreeRoot is the merkle root of data's blocks padded with zero leaves to
// width leaves. scratch is reused to avoid allocation.
func subtreeRoot(data []byte, width int, scratch []Hash) (Hash, []Hash) {
	scratch = blockHashes(scratch[:0], data)
	return merkleRoot(scratch, width, Hash{}), scratch
}
