// Package promtext writes metrics in the Prometheus text exposition format,
// version 0.0.4, for the /metrics pages of the origin and the tracker
// (standard library only: stampede does not need a metrics client library
// to print a few dozen counters).
//
// A page is a sequence of families, each written once: its HELP and TYPE
// lines, then its samples, one per label set. Escaping follows the format:
// in HELP text a backslash and a line feed become \\ and \n; in label
// values a double quote becomes \" as well. Families and samples come out
// in the order they are written, which callers keep fixed (enumerating
// their counters in declaration order), so a page is byte-for-byte the
// same for the same values; MapSamples writes the samples of a map in the
// order of its sorted keys.
//
// Names are checked: a metric name that is not [a-zA-Z_:][a-zA-Z0-9_:]*,
// a label name that is not [a-zA-Z_][a-zA-Z0-9_]* or starts with "__"
// (reserved), a family written twice or a label set repeated within a
// family is a bug in the caller and panics, so a test that prints the page
// once finds it.
package promtext

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Type is the TYPE of a metric family.
type Type string

// The types stampede uses.
const (
	Counter Type = "counter"
	Gauge   Type = "gauge"
)

// Writer accumulates a page in memory; WriteTo sends it in one write, so a
// slow reader of /metrics never sees half a family. The zero Writer is
// ready to use.
type Writer struct {
	buf      []byte
	name     string              // the family being written; "" before the first
	families map[string]struct{} // families written so far
	series   map[string]struct{} // label sets of the current family
}

// Family starts the family name: its HELP and TYPE lines. The samples that
// follow belong to it.
func (w *Writer) Family(name string, typ Type, help string) {
	if !validName(name, true) {
		panic(fmt.Sprintf("promtext: invalid metric name %q", name))
	}
	if typ != Counter && typ != Gauge {
		panic(fmt.Sprintf("promtext: unknown type %q of %s", typ, name))
	}
	if _, dup := w.families[name]; dup {
		panic("promtext: family " + name + " written twice")
	}
	if w.families == nil {
		w.families = make(map[string]struct{})
	}
	w.families[name] = struct{}{}
	w.name = name
	clear(w.series)

	w.buf = append(w.buf, "# HELP "...)
	w.buf = append(w.buf, name...)
	w.buf = append(w.buf, ' ')
	w.buf = appendEscaped(w.buf, help, false)
	w.buf = append(w.buf, "\n# TYPE "...)
	w.buf = append(w.buf, name...)
	w.buf = append(w.buf, ' ')
	w.buf = append(w.buf, typ...)
	w.buf = append(w.buf, '\n')
}

// Sample writes one sample of the current family with value v and labels
// given as name, value pairs: Sample(3, "code", "200") writes
// name{code="200"} 3.
func (w *Writer) Sample(v int64, labels ...string) {
	if w.name == "" {
		panic("promtext: a sample before any family")
	}
	if len(labels)%2 != 0 {
		panic(fmt.Sprintf("promtext: %s: labels must come in name, value pairs, got %q", w.name, labels))
	}
	start := len(w.buf)
	w.buf = append(w.buf, w.name...)
	for i := 0; i < len(labels); i += 2 {
		if !validName(labels[i], false) || strings.HasPrefix(labels[i], "__") {
			panic(fmt.Sprintf("promtext: %s: invalid label name %q", w.name, labels[i]))
		}
		if i == 0 {
			w.buf = append(w.buf, '{')
		} else {
			w.buf = append(w.buf, ',')
		}
		w.buf = append(w.buf, labels[i]...)
		w.buf = append(w.buf, `="`...)
		w.buf = appendEscaped(w.buf, labels[i+1], true)
		w.buf = append(w.buf, '"')
	}
	if len(labels) > 0 {
		w.buf = append(w.buf, '}')
	}
	series := string(w.buf[start:])
	if _, dup := w.series[series]; dup {
		panic("promtext: series " + series + " written twice")
	}
	if w.series == nil {
		w.series = make(map[string]struct{})
	}
	w.series[series] = struct{}{}
	w.buf = append(w.buf, ' ')
	w.buf = strconv.AppendInt(w.buf, v, 10)
	w.buf = append(w.buf, '\n')
}

// MapSamples writes one sample of the current family per entry of values,
// labelled label="key", in the order of the sorted keys (numerically for
// numbers), so that a page does not change with map iteration order.
func MapSamples[K cmp.Ordered](w *Writer, label string, values map[K]int64) {
	for _, k := range slices.Sorted(maps.Keys(values)) {
		w.Sample(values[k], label, fmt.Sprint(k))
	}
}

// Bytes returns the page written so far.
func (w *Writer) Bytes() []byte { return w.buf }

// WriteTo writes the page to dst.
func (w *Writer) WriteTo(dst io.Writer) (int64, error) {
	n, err := dst.Write(w.buf)
	return int64(n), err
}

// validName reports whether s is a metric name (colons allowed) or a label
// name.
func validName(s string, metric bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case c == ':' && metric:
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// appendEscaped appends s escaped as HELP text, or as a label value when
// quoted (which escapes double quotes too). The format is UTF-8: invalid
// bytes become U+FFFD.
func appendEscaped(b []byte, s string, quoted bool) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quoted:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}
