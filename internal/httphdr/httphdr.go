// Package httphdr parses and formats the HTTP header fields stampede relies
// on: byte ranges (RFC 9110 14), Link (RFC 8288, just enough to find a
// rel), Repr-Digest (RFC 9530) and Accept-Encoding (RFC 9110 12.5.3,
// just enough to see gzip). Every parser here reads input from
// untrusted servers and clients, and is fuzzed.
package httphdr

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ContentRange is a parsed "Content-Range: bytes first-last/size" header.
// Size is -1 when the server sent "*".
type ContentRange struct {
	First, Last, Size int64
}

// ParseContentRange parses a satisfied-range Content-Range value.
func ParseContentRange(s string) (ContentRange, error) {
	bad := func(why string) (ContentRange, error) {
		return ContentRange{}, fmt.Errorf("bad Content-Range %q: %s", abbrev(s), why)
	}
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return bad("unit is not bytes")
	}
	rng, size, ok := strings.Cut(rest, "/")
	if !ok {
		return bad("no /size")
	}
	first, last, ok := strings.Cut(rng, "-")
	if !ok {
		return bad("no first-last")
	}
	cr := ContentRange{Size: -1}
	var err error
	if cr.First, err = parseDigits(first); err != nil {
		return bad("first: " + err.Error())
	}
	if cr.Last, err = parseDigits(last); err != nil {
		return bad("last: " + err.Error())
	}
	if size != "*" {
		if cr.Size, err = parseDigits(size); err != nil {
			return bad("size: " + err.Error())
		}
	}
	if cr.Last < cr.First || (cr.Size >= 0 && cr.Last >= cr.Size) {
		return bad("range outside the representation")
	}
	return cr, nil
}

// Range is one byte range of a Range request, resolved against a size:
// bytes [Start, Start+Length).
type Range struct {
	Start, Length int64
}

// ErrUnsatisfiable means no range of the header overlaps the representation.
var ErrUnsatisfiable = errors.New("range not satisfiable")

// maxRanges bounds how many ranges a request may ask for.
const maxRanges = 100

// ParseRange parses a "Range: bytes=..." header against a representation of
// size bytes. Ranges that start past the end are dropped; if none remains the
// error is ErrUnsatisfiable.
func ParseRange(s string, size int64) ([]Range, error) {
	spec, ok := strings.CutPrefix(s, "bytes=")
	if !ok {
		return nil, fmt.Errorf("bad Range %q: unit is not bytes", abbrev(s))
	}
	var out []Range
	parts := strings.Split(spec, ",")
	if len(parts) > maxRanges {
		return nil, fmt.Errorf("bad Range: more than %d ranges", maxRanges)
	}
	specs := 0
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" { // RFC 9110 5.6.1.2: empty list elements are ignored
			continue
		}
		specs++
		first, last, ok := strings.Cut(p, "-")
		if !ok {
			return nil, fmt.Errorf("bad Range %q: %q has no '-'", abbrev(s), abbrev(p))
		}
		var r Range
		switch {
		case first == "": // suffix: the last N bytes
			n, err := parseDigits(last)
			if err != nil {
				return nil, fmt.Errorf("bad Range %q: %w", abbrev(s), err)
			}
			if n == 0 {
				continue
			}
			n = min(n, size)
			r = Range{Start: size - n, Length: n}
		default:
			a, err := parseDigits(first)
			if err != nil {
				return nil, fmt.Errorf("bad Range %q: %w", abbrev(s), err)
			}
			b := size - 1
			if last != "" {
				if b, err = parseDigits(last); err != nil {
					return nil, fmt.Errorf("bad Range %q: %w", abbrev(s), err)
				}
				if b < a {
					return nil, fmt.Errorf("bad Range %q: last before first", abbrev(s))
				}
				b = min(b, size-1)
			}
			if a >= size {
				continue
			}
			r = Range{Start: a, Length: b - a + 1}
		}
		if r.Length > 0 {
			out = append(out, r)
		}
	}
	if specs == 0 {
		return nil, fmt.Errorf("bad Range %q: no range", abbrev(s))
	}
	if len(out) == 0 {
		return nil, ErrUnsatisfiable
	}
	return out, nil
}

// FormatContentRange formats the Content-Range of r within size bytes.
func FormatContentRange(r Range, size int64) string {
	return fmt.Sprintf("bytes %d-%d/%d", r.Start, r.Start+r.Length-1, size)
}

// parseDigits parses a non-negative decimal of at most 18 digits (no sign,
// no spaces), so it never overflows int64.
func parseDigits(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, fmt.Errorf("%q is not a byte position", abbrev(s))
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a byte position", abbrev(s))
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// LinkTarget returns the target of the first link in the Link header values
// whose rel parameter includes rel, or "" if none does.
func LinkTarget(values []string, rel string) string {
	for _, v := range values {
		for link := range splitLinks(v) {
			link = strings.TrimSpace(link)
			if !strings.HasPrefix(link, "<") {
				continue
			}
			end := strings.IndexByte(link, '>')
			if end < 0 {
				continue
			}
			target := link[1:end]
			for param := range splitOutsideQuotes(link[end+1:], ';') {
				k, val, ok := strings.Cut(strings.TrimSpace(param), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "rel") {
					continue
				}
				val = strings.Trim(strings.TrimSpace(val), `"`)
				for r := range strings.FieldsSeq(val) {
					if strings.EqualFold(r, rel) {
						return target
					}
				}
			}
		}
	}
	return ""
}

// splitLinks yields the links of a Link value: separated by commas outside
// both quotes and the <URI-Reference>, which may itself contain commas.
func splitLinks(s string) func(func(string) bool) {
	return func(yield func(string) bool) {
		inQuote, inURI, start := false, false, 0
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case c == '"' && !inURI:
				inQuote = !inQuote
			case c == '<' && !inQuote:
				inURI = true
			case c == '>' && !inQuote:
				inURI = false
			case c == ',' && !inQuote && !inURI:
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(s[start:])
	}
}

// splitOutsideQuotes yields the parts of s separated by sep outside double
// quotes.
func splitOutsideQuotes(s string, sep byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		inQuote, start := false, 0
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '"':
				inQuote = !inQuote
			case sep:
				if !inQuote {
					if !yield(s[start:i]) {
						return
					}
					start = i + 1
				}
			}
		}
		yield(s[start:])
	}
}

// ReprDigestSHA256 returns the sha-256 digest of a Repr-Digest field
// (RFC 9530: a structured-field dictionary of byte sequences), or nil if the
// field carries none. A sha-256 entry that is malformed is an error.
func ReprDigestSHA256(values []string) ([]byte, error) {
	for _, v := range values {
		for member := range splitOutsideQuotes(v, ',') {
			k, val, ok := strings.Cut(strings.TrimSpace(member), "=")
			if !ok || strings.TrimSpace(k) != "sha-256" {
				continue
			}
			val = strings.TrimSpace(val)
			if p := strings.IndexByte(val, ';'); p >= 0 { // parameters
				val = strings.TrimSpace(val[:p])
			}
			if len(val) < 2 || val[0] != ':' || val[len(val)-1] != ':' {
				return nil, fmt.Errorf("bad Repr-Digest sha-256 %q: not a byte sequence", abbrev(val))
			}
			// RFC 8941 4.2.7: parsers should accept missing padding.
			sum, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(val[1:len(val)-1], "="))
			if err != nil || len(sum) != 32 {
				return nil, fmt.Errorf("bad Repr-Digest sha-256 %q: not 32 base64 bytes", abbrev(val))
			}
			return sum, nil
		}
	}
	return nil, nil
}

// FormatReprDigestSHA256 formats a Repr-Digest value for a SHA-256 sum.
func FormatReprDigestSHA256(sum []byte) string {
	return "sha-256=:" + base64.StdEncoding.EncodeToString(sum) + ":"
}

// HasToken reports whether comma-separated field values list token
// (case-insensitive; parameters after ";" ignored).
func HasToken(values []string, token string) bool {
	for _, v := range values {
		for member := range strings.SplitSeq(v, ",") {
			t, _, _ := strings.Cut(member, ";")
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// AcceptsGzip reports whether Accept-Encoding field values accept gzip:
// gzip (or x-gzip) listed with a weight above 0, or "*" with a weight above
// 0 and gzip not listed.
func AcceptsGzip(values []string) bool {
	gzip, star := -1.0, -1.0
	for _, v := range values {
		for member := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(member, ";")
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
					continue
				}
				w, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
				if err != nil || !(w >= 0 && w <= 1) { // NaN too
					w = 0 // a weight we cannot read accepts nothing
				}
				q = w
			}
			switch c := strings.ToLower(strings.TrimSpace(coding)); c {
			case "gzip", "x-gzip":
				gzip = max(gzip, q)
			case "*":
				star = max(star, q)
			}
		}
	}
	if gzip >= 0 {
		return gzip > 0
	}
	return star > 0
}

func abbrev(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
