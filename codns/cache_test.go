package codns

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

func answer(t *testing.T, name string, rrs ...string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	return m
}

func negative(t *testing.T, rcode int, soa string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion("missing.example.", dns.TypeA)
	m.Response = true
	m.Rcode = rcode
	if soa != "" {
		rr, err := dns.NewRR(soa)
		if err != nil {
			t.Fatal(err)
		}
		m.Ns = append(m.Ns, rr)
	}
	return m
}

func withSOA(m *dns.Msg, soa string) *dns.Msg {
	rr, err := dns.NewRR(soa)
	if err != nil {
		panic(err)
	}
	m.Ns = append(m.Ns, rr)
	return m
}

func nxdomain(m *dns.Msg) *dns.Msg {
	m.Rcode = dns.RcodeNameError
	return m
}

func TestTTL(t *testing.T) {
	const soa = "example. 900 IN SOA ns.example. admin.example. 1 7200 3600 1209600 60"
	servfail := answer(t, "a.example.", "a.example. 60 IN A 192.0.2.1")
	servfail.Rcode = dns.RcodeServerFailure
	truncated := answer(t, "a.example.")
	truncated.Truncated = true
	for _, tc := range []struct {
		name string
		m    *dns.Msg
		want time.Duration
		ok   bool
	}{
		{"shortest answer", answer(t, "a.example.", "a.example. 300 IN CNAME b.example.", "b.example. 60 IN A 192.0.2.1"), 60 * time.Second, true},
		{"capped", answer(t, "a.example.", "a.example. 604800 IN A 192.0.2.1"), 24 * time.Hour, true},
		{"zero", answer(t, "a.example.", "a.example. 0 IN A 192.0.2.1"), 0, false},
		{"nxdomain: SOA minimum", negative(t, dns.RcodeNameError, soa), 60 * time.Second, true},
		{"nodata: SOA TTL", negative(t, dns.RcodeSuccess, "example. 30 IN SOA ns.example. admin.example. 1 7200 3600 1209600 600"), 30 * time.Second, true},
		{"negative capped", negative(t, dns.RcodeNameError, "example. 86400 IN SOA ns.example. admin.example. 1 7200 3600 1209600 86400"), 5 * time.Minute, true},
		{"negative without SOA", negative(t, dns.RcodeNameError, ""), 0, false},
		{"nodata after a CNAME: SOA minimum", withSOA(answer(t, "a.example.", "a.example. 3600 IN CNAME b.example."), soa), 60 * time.Second, true},
		{"nxdomain after a shorter CNAME", nxdomain(withSOA(answer(t, "a.example.", "a.example. 30 IN CNAME b.example."), soa)), 30 * time.Second, true},
		{"a CNAME alone, no SOA", answer(t, "a.example.", "a.example. 3600 IN CNAME b.example."), 0, false},
		{"an SOA beside the answer", withSOA(answer(t, "a.example.", "a.example. 300 IN A 192.0.2.1"), soa), 300 * time.Second, true},
		{"servfail", servfail, 0, false},
		{"truncated", truncated, 0, false},
	} {
		got, ok := TTL(tc.m, 24*time.Hour, 5*time.Minute)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: TTL %v %v, want %v %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCacheAgesAndExpires(t *testing.T) {
	c := NewCache(CacheConfig{})
	t0 := time.Unix(1000, 0)
	m := answer(t, "a.example.", "a.example. 60 IN A 192.0.2.1")
	m.SetEdns0(1232, false)
	k := KeyOf(m.Question[0], false)
	if !c.Put(k, m, t0) {
		t.Fatal("not cached")
	}
	m.Answer[0].Header().Ttl = 1 // the cache holds its own copy
	got := c.Get(KeyOf(dns.Question{Name: "A.Example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, false), t0.Add(20500*time.Millisecond))
	if got == nil {
		t.Fatal("miss, in another case")
	}
	if ttl := got.Answer[0].Header().Ttl; ttl != 40 {
		t.Errorf("TTL after 20.5 s: %d, want 40", ttl)
	}
	if got.IsEdns0() != nil {
		t.Error("the OPT record was kept")
	}
	got.Answer[0].Header().Ttl = 7
	if again := c.Get(k, t0.Add(30*time.Second)); again.Answer[0].Header().Ttl != 30 {
		t.Errorf("TTL %d after changing a copy, want 30", again.Answer[0].Header().Ttl)
	}
	if c.Get(KeyOf(m.Question[0], true), t0) != nil {
		t.Error("hit for the DO bit set")
	}
	if c.Get(k, t0.Add(60*time.Second)) != nil {
		t.Error("hit at expiry")
	}
	if c.Len() != 0 {
		t.Errorf("%d entries after expiry, want 0", c.Len())
	}
}

// A record is served with no longer a TTL than the answer is held: a
// negative answer's SOA carries the negative TTL (RFC 2308 section 5),
// and a capped answer the cap.
func TestCacheServesHeldTTL(t *testing.T) {
	c := NewCache(CacheConfig{MaxTTL: time.Hour})
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		m    *dns.Msg
		want uint32
	}{
		{negative(t, dns.RcodeNameError, "example. 900 IN SOA ns.example. admin.example. 1 7200 3600 1209600 60"), 40},
		{answer(t, "a.example.", "a.example. 604800 IN A 192.0.2.1"), 3600 - 20},
	} {
		k := KeyOf(tc.m.Question[0], false)
		if !c.Put(k, tc.m, t0) {
			t.Fatalf("%v not cached", tc.m.Question[0])
		}
		got := c.Get(k, t0.Add(20*time.Second))
		rr := append(got.Answer, got.Ns...)[0]
		if rr.Header().Ttl != tc.want {
			t.Errorf("%v after 20 s: TTL %d, want %d", tc.m.Question[0].Name, rr.Header().Ttl, tc.want)
		}
	}
}

func TestCacheLRU(t *testing.T) {
	c := NewCache(CacheConfig{Entries: 2})
	now := time.Unix(1000, 0)
	keys := make([]Key, 3)
	for i, name := range []string{"a.example.", "b.example.", "c.example."} {
		m := answer(t, name, name+" 60 IN A 192.0.2.1")
		keys[i] = KeyOf(m.Question[0], false)
		c.Put(keys[i], m, now)
		if i == 1 && c.Get(keys[0], now) == nil { // a used last: b goes
			t.Fatal("a missing")
		}
	}
	if c.Len() != 2 || c.Get(keys[1], now) != nil || c.Get(keys[0], now) == nil || c.Get(keys[2], now) == nil {
		t.Errorf("after 3 puts into 2 entries: len %d; want a and c kept, b gone", c.Len())
	}
}
