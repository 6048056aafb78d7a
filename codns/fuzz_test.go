package codns

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzCache feeds the cache answers made of arbitrary bytes: whatever
// parses is cached no longer than its records and the caps say, comes
// back with TTLs no higher than stored and without OPT or TSIG records,
// and nothing panics.
func FuzzCache(f *testing.F) {
	for _, m := range []*dns.Msg{
		new(dns.Msg).SetQuestion("a.example.", dns.TypeA),
		func() *dns.Msg {
			m := new(dns.Msg).SetQuestion("b.example.", dns.TypeAAAA)
			m.Response, m.Rcode = true, dns.RcodeNameError
			soa, _ := dns.NewRR("example. 900 IN SOA ns.example. admin.example. 1 7200 3600 1209600 60")
			m.Ns = append(m.Ns, soa)
			m.SetEdns0(1232, true)
			return m
		}(),
		func() *dns.Msg {
			m := new(dns.Msg).SetQuestion("c.example.", dns.TypeA)
			m.Response = true
			a, _ := dns.NewRR("c.example. 3600 IN A 192.0.2.1")
			m.Answer = append(m.Answer, a)
			return m
		}(),
	} {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(30))
	}
	f.Fuzz(func(t *testing.T, data []byte, after uint16) {
		m := new(dns.Msg)
		if m.Unpack(data) != nil || len(m.Question) != 1 {
			return
		}
		const maxTTL, maxNeg = time.Hour, 5 * time.Minute
		ttl, ok := TTL(m, maxTTL, maxNeg)
		if ok && (ttl <= 0 || ttl > maxTTL || (m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0) && ttl > maxNeg) {
			t.Fatalf("TTL %v for %v", ttl, m)
		}
		c := NewCache(CacheConfig{Entries: 4, MaxTTL: maxTTL, MaxNegativeTTL: maxNeg})
		now := time.Unix(1_000_000, 0)
		k := KeyOf(m.Question[0], false)
		if c.Put(k, m, now) != ok {
			t.Fatalf("Put %v, TTL said %v", !ok, ok)
		}
		got := c.Get(k, now.Add(time.Duration(after)*time.Second))
		switch {
		case !ok && got != nil:
			t.Fatal("an answer not to cache came back")
		case ok && time.Duration(after)*time.Second >= ttl && got != nil:
			t.Fatalf("came back after %d s, its TTL %v", after, ttl)
		case ok && time.Duration(after)*time.Second < ttl && got == nil:
			t.Fatalf("gone after %d s, its TTL %v", after, ttl)
		}
		if got == nil {
			return
		}
		if got.IsEdns0() != nil || got.IsTsig() != nil {
			t.Error("OPT or TSIG kept")
		}
		for i, rr := range got.Answer {
			if rr.Header().Ttl > m.Answer[i].Header().Ttl {
				t.Errorf("TTL %d came back above %d", rr.Header().Ttl, m.Answer[i].Header().Ttl)
			}
		}
	})
}
