package bench

import "testing"

// TestStaleNetnsNames: --cleanup finds the namespaces of every kind of
// run (crowds and pushes "stb", churn "stch"), with the pid that made
// them, and nothing else.
func TestStaleNetnsNames(t *testing.T) {
	for _, c := range []struct {
		name string
		pid  string // "" if not the harness's
	}{
		{"stb123x1-h0", "123"},
		{"stb123x1-br", "123"},
		{"stch4567x2-inet", "4567"},
		{"stch4567x2-c0h1", "4567"},
		{"stbx1-h0", ""},
		{"stch-inet", ""},
		{"stc123x1-h0", ""},
		{"web-ns1", ""},
	} {
		m := staleNetns.FindStringSubmatch(c.name)
		got := ""
		if m != nil {
			got = m[1]
		}
		if got != c.pid {
			t.Errorf("%s: pid %q, want %q", c.name, got, c.pid)
		}
	}
}
