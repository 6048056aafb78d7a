package codns

import (
	"container/list"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Key names a cached answer: the question, in lower case, and whether
// DNSSEC records were asked for (the DO bit), which changes the answer.
type Key struct {
	Name        string
	Type, Class uint16
	DO          bool
}

// KeyOf returns the cache key of question q.
func KeyOf(q dns.Question, do bool) Key {
	return Key{Name: strings.ToLower(q.Name), Type: q.Qtype, Class: q.Qclass, DO: do}
}

// CacheConfig bounds the cache. Its zero value is the defaults.
type CacheConfig struct {
	// Entries is the most answers kept (default 10,000); past it, the
	// least recently used goes.
	Entries int
	// MaxTTL caps how long an answer is kept (default 1 day), whatever
	// its records say.
	MaxTTL time.Duration
	// MaxNegativeTTL caps how long a negative answer (NXDOMAIN, or no
	// records of the type) is kept (default 5 minutes). RFC 2308 takes
	// the smaller of its SOA's TTL and MINIMUM and suggests a cap of
	// hours; a shorter one lets a name that was missing appear soon.
	MaxNegativeTTL time.Duration
}

func (c CacheConfig) withDefaults() CacheConfig {
	if c.Entries <= 0 {
		c.Entries = 10000
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = 24 * time.Hour
	}
	if c.MaxNegativeTTL <= 0 {
		c.MaxNegativeTTL = 5 * time.Minute
	}
	return c
}

// Cache holds answers until their TTL runs out, the least recently used
// dropped first past its size. It is pure: the time is passed in, and it
// is not safe for concurrent use. It keeps its own copy of what it is
// given and gives out copies.
type Cache struct {
	cfg CacheConfig
	ll  *list.List // of *cacheEntry, most recently used first
	m   map[Key]*list.Element
}

type cacheEntry struct {
	key     Key
	msg     *dns.Msg
	stored  time.Time
	expires time.Time
}

// NewCache returns an empty cache.
func NewCache(cfg CacheConfig) *Cache {
	return &Cache{cfg: cfg.withDefaults(), ll: list.New(), m: make(map[Key]*list.Element)}
}

// Len returns how many answers are held, expired ones included until
// they are asked for or pushed out.
func (c *Cache) Len() int { return c.ll.Len() }

// Get returns a copy of the answer for k, its TTLs lowered by the time it
// has been held, or nil when there is none or it has expired.
func (c *Cache) Get(k Key, now time.Time) *dns.Msg {
	el, ok := c.m[k]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expires) {
		c.ll.Remove(el)
		delete(c.m, k)
		return nil
	}
	c.ll.MoveToFront(el)
	m := e.msg.Copy()
	age := uint32(now.Sub(e.stored) / time.Second)
	for _, section := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range section {
			h := rr.Header()
			h.Ttl -= min(h.Ttl, age)
		}
	}
	return m
}

// Put keeps m, an answer to k, for as long as TTL says, and reports
// whether it did.
func (c *Cache) Put(k Key, m *dns.Msg, now time.Time) bool {
	ttl, ok := TTL(m, c.cfg.MaxTTL, c.cfg.MaxNegativeTTL)
	if !ok {
		return false
	}
	m = m.Copy()
	m.Extra = withoutPseudo(m.Extra)
	// No record is served with a TTL longer than the answer is held: a
	// record past a cap, or a negative answer's SOA whose TTL is above
	// its MINIMUM (RFC 2308 section 5 has the SOA's TTL carry the
	// negative TTL), would otherwise be cached downstream for longer.
	secs := uint32(ttl / time.Second)
	for _, section := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range section {
			h := rr.Header()
			h.Ttl = min(h.Ttl, secs)
		}
	}
	e := &cacheEntry{key: k, msg: m, stored: now, expires: now.Add(ttl)}
	if el, ok := c.m[k]; ok {
		el.Value = e
		c.ll.MoveToFront(el)
		return true
	}
	c.m[k] = c.ll.PushFront(e)
	for c.ll.Len() > c.cfg.Entries {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.m, last.Value.(*cacheEntry).key)
	}
	return true
}

// TTL returns how long answer m may be cached, capped by maxTTL, or by
// maxNegative for a negative answer, and false when it must not be: a
// failure (neither NOERROR nor NXDOMAIN), a truncated answer, a negative
// answer without the SOA record RFC 2308 takes its TTL from, or a TTL of
// 0. A positive answer lasts as long as its shortest-lived answer record.
// A negative one, NXDOMAIN or NODATA (NOERROR without a record of the
// type asked, RFC 2308 section 2.2), lasts as the smaller of its SOA's
// TTL and MINIMUM, and no longer than the CNAMEs that led to the missing
// name, if any.
func TTL(m *dns.Msg, maxTTL, maxNegative time.Duration) (time.Duration, bool) {
	if m.Truncated || m.Rcode != dns.RcodeSuccess && m.Rcode != dns.RcodeNameError {
		return 0, false
	}
	var ttl uint32
	var found bool
	for _, rr := range m.Answer {
		if t := rr.Header().Ttl; !found || t < ttl {
			ttl, found = t, true
		}
	}
	if m.Rcode == dns.RcodeSuccess && answered(m) {
		maxNegative = maxTTL
	} else {
		i := slices.IndexFunc(m.Ns, func(rr dns.RR) bool { _, ok := rr.(*dns.SOA); return ok })
		if i < 0 {
			return 0, false
		}
		soa := m.Ns[i].(*dns.SOA)
		if neg := min(soa.Hdr.Ttl, soa.Minttl); !found || neg < ttl {
			ttl, found = neg, true
		}
	}
	if !found || ttl == 0 {
		return 0, false
	}
	return min(time.Duration(ttl)*time.Second, maxNegative), true
}

// answered reports whether the answer section of m holds a record of the
// type its question asks for, which a CNAME chain alone does not.
func answered(m *dns.Msg) bool {
	if len(m.Question) != 1 {
		return len(m.Answer) > 0
	}
	q := m.Question[0].Qtype
	return slices.ContainsFunc(m.Answer, func(rr dns.RR) bool {
		return q == dns.TypeANY || rr.Header().Rrtype == q
	})
}

// withoutPseudo returns extra without its EDNS OPT and TSIG records,
// which belong to one exchange and not to the answer.
func withoutPseudo(extra []dns.RR) []dns.RR {
	out := extra[:0:0]
	for _, rr := range extra {
		if t := rr.Header().Rrtype; t != dns.TypeOPT && t != dns.TypeTSIG {
			out = append(out, rr)
		}
	}
	return out
}
