package coordinator

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is the seam between Raft's NetworkTransport and the network:
// a listener plus a dialer. With TLS configured both sides wrap in TLS; the
// rest of the server never sees the difference.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	tls       *tls.Config
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func newStreamLayer(ln net.Listener, advertise string, tlsCfg *tls.Config) (*streamLayer, error) {
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	return &streamLayer{Listener: ln, advertise: addr, tls: tlsCfg}, nil
}

// Addr returns the advertised address (what peers dial).
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.tls != nil {
		return tls.DialWithDialer(d, "tcp", string(address), s.tls)
	}
	return d.Dial("tcp", string(address))
}
