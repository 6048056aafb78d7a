package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// qdiscReader reads the byte counters of the root qdiscs of one network
// namespace, as tc -s qdisc show does, over a netlink socket opened in
// that namespace: a reading is one request in the harness's own process,
// timed to the microsecond, where running tc would take tens of
// milliseconds on a busy machine and blur every 1 s window.
type qdiscReader struct {
	fd    int
	seq   uint32
	names map[int32]string // ifindex -> device
}

// Netlink's traffic control layout (linux/rtnetlink.h, linux/gen_stats.h,
// linux/pkt_sched.h), which x/sys/unix does not spell out.
const (
	sizeofTcMsg   = 20         // family, 3 pad, ifindex, handle, parent, info
	tcHRoot       = 0xFFFFFFFF // the parent of a root qdisc
	tcaStatsBasic = 1          // in TCA_STATS2: bytes (u64), packets (u32)
)

// openQdiscReader opens a reader of namespace ns's qdiscs.
func openQdiscReader(ns string) (*qdiscReader, error) {
	q := &qdiscReader{names: map[int32]string{}}
	err := inNetns(ns, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return err
		}
		q.fd = fd
		ifs, err := net.Interfaces()
		if err != nil {
			unix.Close(fd)
			return err
		}
		for _, i := range ifs {
			q.names[int32(i.Index)] = i.Name
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", ns, err)
	}
	return q, nil
}

func (q *qdiscReader) close() { unix.Close(q.fd) }

// read returns the bytes each device's root qdisc has sent, and when the
// kernel was asked.
func (q *qdiscReader) read() (map[string]int64, time.Time, error) {
	q.seq++
	req := make([]byte, unix.NLMSG_HDRLEN+sizeofTcMsg)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.RTM_GETQDISC)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], q.seq)
	at := time.Now()
	if err := unix.Sendto(q.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, at, err
	}
	out := map[string]int64{}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			return nil, at, err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, at, err
		}
		for _, m := range msgs {
			if m.Header.Seq != q.seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, at, nil
			case unix.NLMSG_ERROR:
				return nil, at, errors.New("netlink: RTM_GETQDISC refused")
			case unix.RTM_NEWQDISC:
				if len(m.Data) < sizeofTcMsg || ne.Uint32(m.Data[12:]) != tcHRoot {
					continue
				}
				if b, ok := statsBytes(m.Data[sizeofTcMsg:]); ok {
					out[q.names[int32(ne.Uint32(m.Data[4:]))]] = b
				}
			}
		}
	}
}

// statsBytes finds the bytes sent in a qdisc message's attributes: in
// TCA_STATS2's TCA_STATS_BASIC, else in the older TCA_STATS.
func statsBytes(attrs []byte) (int64, bool) {
	var old int64
	found := false
	for a := range netlinkAttrs(attrs) {
		switch a.typ {
		case unix.TCA_STATS2:
			for s := range netlinkAttrs(a.data) {
				if s.typ == tcaStatsBasic && len(s.data) >= 8 {
					return int64(binary.NativeEndian.Uint64(s.data)), true
				}
			}
		case unix.TCA_STATS:
			if len(a.data) >= 8 {
				old, found = int64(binary.NativeEndian.Uint64(a.data)), true
			}
		}
	}
	return old, found
}

type netlinkAttr struct {
	typ  uint16
	data []byte
}

// netlinkAttrs iterates over the attributes in b (struct rtattr: length,
// type, data, padded to 4 bytes); nested ones keep their flag bits off.
func netlinkAttrs(b []byte) func(func(netlinkAttr) bool) {
	return func(yield func(netlinkAttr) bool) {
		for len(b) >= 4 {
			l := int(binary.NativeEndian.Uint16(b))
			if l < 4 || l > len(b) {
				return
			}
			if !yield(netlinkAttr{typ: binary.NativeEndian.Uint16(b[2:]) & 0x3fff, data: b[4:l]}) {
				return
			}
			b = b[min((l+3)&^3, len(b)):]
		}
	}
}
