package origin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/pion/stun/v3"
)

// ServeSTUN answers STUN binding requests (RFC 8489) on pc until ctx is
// done, so that visitors' browsers and native WebRTC peers learn the
// address they are seen from without a third party's server
// (docs/browser.md). It answers nothing else: no TURN, no other method, no
// request that does not decode. An answer is the request's size or
// less plus the address, so a spoofed source gains an attacker nothing.
func ServeSTUN(ctx context.Context, pc net.PacketConn, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	buf := make([]byte, 1500)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("origin: stun: %w", err)
		}
		res, err := stunAnswer(buf[:n], addr)
		if err != nil {
			log.Debug("stun: not answered", "from", addr.String(), "err", err)
			continue
		}
		if _, err := pc.WriteTo(res, addr); err != nil {
			log.Debug("stun: answer not sent", "to", addr.String(), "err", err)
		}
	}
}

// stunAnswer is the answer to the request req from addr.
func stunAnswer(req []byte, addr net.Addr) ([]byte, error) {
	if !stun.IsMessage(req) {
		return nil, errors.New("not a STUN message")
	}
	m := &stun.Message{Raw: append([]byte(nil), req...)}
	if err := m.Decode(); err != nil {
		return nil, err
	}
	if m.Type != stun.BindingRequest {
		return nil, fmt.Errorf("%v: only binding requests are answered", m.Type)
	}
	udp, ok := addr.(*net.UDPAddr)
	if !ok {
		return nil, fmt.Errorf("%T: not a UDP address", addr)
	}
	res, err := stun.Build(stun.NewTransactionIDSetter(m.TransactionID), stun.BindingSuccess,
		&stun.XORMappedAddress{IP: udp.IP, Port: udp.Port}, stun.Fingerprint)
	if err != nil {
		return nil, err
	}
	return res.Raw, nil
}
