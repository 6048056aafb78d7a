package originclient

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stampede-dev/stampede/contract"
	"github.com/stampede-dev/stampede/manifest"
	"github.com/stampede-dev/stampede/store"
)

// storeRequest is a request for piece 1 of m whose Put writes into a
// store in a temporary directory, for tests that hand the client origin
// answers directly.
func storeRequest(t *testing.T, m *manifest.Manifest) (*Client, *PieceRequest, *store.File) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "f"), m, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &PieceRequest{Piece: 1, Got: 1, Buf: make([]byte, m.PieceSize),
		Put: func(i int, data []byte) error { return st.WritePiece(i, data) }}
	return New(Config{}), p, st
}

// randomData is n bytes from a generator seeded with seed.
func randomData(n int, seed byte) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

func TestReadOverloadAnswer(t *testing.T) {
	data := randomData(200_000, 5)
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f")
	if err != nil {
		t.Fatal(err)
	}
	piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }
	last := m.NumPieces() - 1
	answer := func(i int, body []byte, mod func(h http.Header)) *http.Response {
		h := http.Header{}
		off := m.PieceOffset(i)
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+m.PieceLen(i)-1, m.Size))
		h.Set(contract.PieceHeader, strconv.Itoa(i))
		h.Set(contract.RootHeader, m.Root.String())
		h.Set(contract.PeersHeader, "192.0.2.7:7000, [2001:db8::5]:7001, bogus, 192.0.2.8:0")
		h.Set("Retry-After", "3")
		if mod != nil {
			mod(h)
		}
		return &http.Response{StatusCode: 206, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
	}
	tests := []struct {
		name string
		res  *http.Response
		want func(error) bool
	}{
		{"another piece", answer(last, piece(last), nil), func(err error) bool {
			oa, ok := errors.AsType[*OverloadAnswer](err)
			return ok && oa.Asked == 1 && oa.Piece == last && oa.Wait == 3*time.Second &&
				slices.Equal(oa.Peers, []string{"192.0.2.7:7000", "[2001:db8::5]:7001"})
		}},
		{"corrupt", answer(2, bytes.Repeat([]byte{1}, int(m.PieceLen(2))), nil), isCorrupt},
		{"short", answer(2, piece(2)[:100], nil), func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"range not the piece", answer(2, piece(2), func(h http.Header) { h.Set(contract.PieceHeader, "3") }),
			func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"piece out of range", answer(2, piece(2), func(h http.Header) { h.Set(contract.PieceHeader, strconv.Itoa(last+1)) }),
			func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"other root", answer(2, piece(2), func(h http.Header) { h.Set(contract.RootHeader, strings.Repeat("ab", 32)) }),
			func(err error) bool { return errors.Is(err, ErrChanged) }},
	}
	for _, tt := range tests {
		c, p, st := storeRequest(t, m)
		p.Overload = true
		err := c.readOverloadAnswer(t.Context(), m, p, tt.res)
		if !tt.want(err) {
			t.Errorf("%s: %v", tt.name, err)
		}
		stored := st.Count()
		if ok := tt.name == "another piece"; (stored == 1) != ok {
			t.Errorf("%s: %d pieces stored", tt.name, stored)
		}
		st.Close()
	}
}

func TestReadPickAnswer(t *testing.T) {
	data := randomData(200_000, 6)
	m, err := manifest.FromReader(bytes.NewReader(data), int64(len(data)), "f")
	if err != nil {
		t.Fatal(err)
	}
	piece := func(i int) []byte { return data[m.PieceOffset(i) : m.PieceOffset(i)+m.PieceLen(i)] }
	answer := func(i int, named string, body []byte) *http.Response {
		h := http.Header{}
		off := m.PieceOffset(i)
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+m.PieceLen(i)-1, m.Size))
		h.Set(contract.PieceHeader, named)
		return &http.Response{StatusCode: 206, Header: h, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}
	}
	// The request asked for piece 1 offering 2 and 4.
	tests := []struct {
		name   string
		res    *http.Response
		got    int // -1: an error
		stored int
		isErr  func(error) bool
	}{
		{"an offered piece", answer(4, "4", piece(4)), 4, 1, nil},
		{"a piece not offered", answer(3, "3", piece(3)), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"named one, sent another", answer(2, "4", piece(2)), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"not a number", answer(2, "two", piece(2)), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
		{"corrupt", answer(2, "2", bytes.Repeat([]byte{7}, int(m.PieceLen(2)))), -1, 0, isCorrupt},
		{"short", answer(2, "2", piece(2)[:10]), -1, 0, func(err error) bool { return errors.Is(err, ErrProtocol) }},
	}
	for _, tt := range tests {
		c, p, st := storeRequest(t, m)
		p.Candidates = []int{2, 4}
		err := c.readPickAnswer(t.Context(), m, p, tt.res)
		switch {
		case tt.isErr == nil && (err != nil || p.Got != tt.got):
			t.Errorf("%s: got piece %d, %v; want %d", tt.name, p.Got, err, tt.got)
		case tt.isErr != nil && !tt.isErr(err):
			t.Errorf("%s: %v", tt.name, err)
		}
		if n := st.Count(); n != tt.stored {
			t.Errorf("%s: %d pieces stored, want %d", tt.name, n, tt.stored)
		}
		st.Close()
	}
}
