package bench

import (
	"encoding/binary"
	"testing"
)

func TestStatsBytes(t *testing.T) {
	attr := func(typ uint16, data []byte) []byte {
		b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
		b = binary.NativeEndian.AppendUint16(b, typ)
		b = append(b, data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	u64 := func(v uint64) []byte { return binary.NativeEndian.AppendUint64(nil, v) }
	kind := attr(1, []byte("tbf\x00"))
	// TCA_STATS2 (nested, flagged as such) holding TCA_STATS_BASIC wins
	// over the older TCA_STATS.
	stats2 := attr(7|0x8000, append(attr(3, u64(9)), attr(1, append(u64(123456789), 0, 0, 0, 0))...))
	if b, ok := statsBytes(append(append(kind, attr(3, u64(42))...), stats2...)); !ok || b != 123456789 {
		t.Errorf("TCA_STATS2: %d %v", b, ok)
	}
	if b, ok := statsBytes(append(kind, attr(3, u64(42))...)); !ok || b != 42 {
		t.Errorf("TCA_STATS: %d %v", b, ok)
	}
	if _, ok := statsBytes(append(kind, 0xff, 0xff)); ok {
		t.Errorf("no stats, truncated: found some")
	}
}
