package bench

import (
	"fmt"
	"html"
	"io"
	"slices"
	"strings"

	"github.com/stampede-dev/stampede/internal/units"
)

// The words of a report for someone who has not read the benchmark docs:
// the headline, and what the bounds and each column mean. The terminal
// table and report.html share them.

// Headline compares stampede with plain HTTP from the same origin in the
// figures a newcomer asks about first. Each ratio is HTTP's figure over
// stampede's (medians over the runs), so above 1 stampede did better.
type Headline struct {
	Swarm, HTTP *SystemResult
	Last        float64 // the last peer's completion: how many times sooner
	Mean        float64 // the mean completion time: how many times shorter
	Origin      float64 // the origin's bytes: how many times fewer
}

// plainHTTP are the systems whose peers fetch every byte from the origin,
// in the order the headline prefers them.
var plainHTTP = []string{SysHTTP, SysNginx, SysCurl}

// Headline is the comparison, and false when the report lacks stampede or a
// plain HTTP system that delivered to every peer: a system with peers
// missing would look faster than it was.
func (r *Report) Headline() (Headline, bool) {
	var h Headline
	complete := func(name string) *SystemResult {
		i := slices.IndexFunc(r.Systems, func(s *SystemResult) bool { return s.System == name && s.Complete })
		if i < 0 {
			return nil
		}
		return r.Systems[i]
	}
	h.Swarm = complete(SysStampede)
	for _, name := range plainHTTP {
		if h.HTTP = complete(name); h.HTTP != nil {
			break
		}
	}
	if h.Swarm == nil || h.HTTP == nil {
		return h, false
	}
	sw, ht := h.Swarm, h.HTTP
	if !(sw.Last.Median > 0 && sw.Mean.Median > 0 && sw.OriginBytes.Median > 0) {
		return h, false
	}
	h.Last = ht.Last.Median / sw.Last.Median
	h.Mean = ht.Mean.Median / sw.Mean.Median
	h.Origin = ht.OriginBytes.Median / sw.OriginBytes.Median
	return h, true
}

// Sentence is the headline in one line.
func (h Headline) Sentence() string {
	return fmt.Sprintf("%s the last peer %s, the average peer %s, %s from the origin.",
		h.against(), faster(h.Last), faster(h.Mean), fewer(h.Origin))
}

func (h Headline) against() string {
	s := fmt.Sprintf("%s against %s, same origin and caps", h.Swarm.Label, h.HTTP.Label)
	if len(h.Swarm.Runs) > 1 || len(h.HTTP.Runs) > 1 {
		s += " (medians over the runs)"
	}
	return s + ":"
}

// rows are the figures behind the sentence: what, stampede's, HTTP's, and
// the ratio in words.
func (h Headline) rows() [][4]string {
	sw, ht := h.Swarm, h.HTTP
	bytes := fewer(h.Origin)
	if d := int64(ht.OriginBytes.Median - sw.OriginBytes.Median); d > 0 {
		bytes += fmt.Sprintf(" (%s less)", units.Bytes(d))
	}
	return [][4]string{
		{"last peer done after", secs(sw.Last.Median), secs(ht.Last.Median), faster(h.Last)},
		{"average peer done after", secs(sw.Mean.Median), secs(ht.Mean.Median), faster(h.Mean)},
		{"the origin sent", units.Bytes(int64(sw.OriginBytes.Median)), units.Bytes(int64(ht.OriginBytes.Median)), bytes},
	}
}

// write prints the headline for a terminal, where its rows say all the
// sentence does.
func (h Headline) write(w io.Writer) {
	fmt.Fprintln(w, h.against())
	for _, row := range h.rows() {
		fmt.Fprintf(w, "  %-24s %9s against %9s: %s\n", row[0], row[1], row[2], row[3])
	}
}

func faster(x float64) string { return times(x, "faster", "slower", "about as fast") }
func fewer(x float64) string  { return times(x, "fewer bytes", "more bytes", "about as many bytes") }

// times words a ratio: "15.6 times faster", "1.3 times slower", or the
// same within 5%, where a run's noise is.
func times(x float64, better, worse, same string) string {
	switch {
	case x >= 1.05:
		return fmt.Sprintf("%.1f times %s", x, better)
	case x <= 1/1.05:
		return fmt.Sprintf("%.1f times %s", 1/x, worse)
	}
	return same
}

// columns are the summary table's columns and what each means.
var columns = []struct{ name, help string }{
	{"system", "How the peers got the file:"},
	{"runs", "How many times the crowd was run with this system. With more than one, each figure is the median over the runs " +
		"(the range is under it), and the charts show the run with the median last completion."},
	{"peers done", "Peers that ended with the whole file, checked against its hashes, out of those that took part."},
	{"mean", "How long a peer took on average, from its start to holding the whole checked file."},
	{"p50", "Half the peers were done within this time (the median)."},
	{"p90", "Nine peers in ten were done within this time."},
	{"last", "From the first peer's start to the last peer's finish: how long the whole crowd took."},
	{"origin bytes", "What the origin sent in all: what the crowd cost the server."},
	{"bytes/F", "The origin's bytes in copies of the file (F is the file's size). Plain HTTP sends one copy per peer; " +
		"a swarm can make do with about one."},
	{"last/T_KR", "last divided by T_KR: 1 would be as fast as the caps allow, 2 twice as long."},
	{"last/T_KR(R)", "last divided by T_KR(R): the same, given how many copies R this system took from the origin."},
}

// systemHelp says in a line how each system delivers the file.
var systemHelp = map[string]string{
	SysStampede: "the peers pass pieces of the file to each other and fetch from the origin only what no peer has yet.",
	SysHTTP:     "every peer downloads the whole file from the origin over plain HTTP, as a browser would.",
	SysNginx:    "every peer downloads the whole file over plain HTTP from nginx, capped as the origin is.",
	SysCurl:     "every peer downloads the whole file from the origin with curl.",
	SysAria2:    "BitTorrent: aria2c peers, a seeder and a tracker (opentracker).",
}

// boundsHelp explains T_KR, the HTTP bound and T_KR(R) with this
// scenario's figures, so a reader sees which limit binds.
func (r *Report) boundsHelp() []string {
	c := CrowdOf(r.Scenario)
	origin, download, crowd := c.TKRTerms()
	term := func(t float64) string {
		if t == 0 {
			return "no limit, uncapped"
		}
		return secs(t)
	}
	n := len(c.Up)
	return []string{
		fmt.Sprintf("T_KR is the least time in which every peer could have the file, whatever the software, given these bandwidth caps "+
			"(the bound of Kumar and Ross, 2006). It is the longest of three times: the origin sending one copy of the file (%s here), "+
			"the slowest peer downloading one (%s), and all %d copies passing through the upload of the origin and every peer together (%s). "+
			"Here T_KR = %s. It assumes every peer is there from the start.",
			term(origin), term(download), n, term(crowd), secs(r.TKR)),
		fmt.Sprintf("Plain HTTP cannot beat the origin sending all %d copies by itself, or the slowest peer downloading one: "+
			"at least %s here (the HTTP bound).", n, secs(r.HTTPBound)),
		"T_KR(R) is T_KR when the origin sends R copies in all (the bytes/F column): the peers must then carry the other copies between them, " +
			"which can take longer than T_KR.",
	}
}

// html is the headline as report.html shows it, at the top.
func (h Headline) html() string {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, "<div class=\"headline\">\n<p><b>%s</b></p>\n<table>\n<tr><th></th><th>%s</th><th>%s</th><th></th></tr>\n",
		esc(h.Sentence()), esc(h.Swarm.Label), esc(h.HTTP.Label))
	for _, row := range h.rows() {
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n", esc(row[0]), esc(row[1]), esc(row[2]), esc(row[3]))
	}
	b.WriteString("</table>\n</div>\n")
	return b.String()
}

// helpHTML is what the bounds and the columns mean, under the table.
func (r *Report) helpHTML() string {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString("<h2>What the figures mean</h2>\n")
	for _, p := range r.boundsHelp() {
		fmt.Fprintf(&b, "<p>%s</p>\n", esc(p))
	}
	b.WriteString("<dl class=\"help\">\n")
	for _, c := range columns {
		fmt.Fprintf(&b, "<dt>%s</dt><dd>%s", esc(c.name), esc(c.help))
		if c.name == "system" {
			b.WriteString("<ul>")
			for _, s := range r.Systems {
				if help, ok := systemHelp[s.System]; ok {
					fmt.Fprintf(&b, "<li><b>%s</b>: %s</li>", esc(s.Label), esc(help))
				}
			}
			b.WriteString("</ul>")
		}
		b.WriteString("</dd>\n")
	}
	b.WriteString("</dl>\n")
	return b.String()
}
