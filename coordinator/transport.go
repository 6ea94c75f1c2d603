package coordinator

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// handshakeTimeout bounds a TLS handshake on the Raft port, so a peer that
// connects and says nothing (or speaks plaintext slowly) cannot hold a
// connection open.
const handshakeTimeout = 10 * time.Second

// streamLayer is the seam between Raft's NetworkTransport and the network:
// a listener plus a dialer. With TLS configured both sides wrap in TLS; the
// rest of the server never sees the difference.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	serverTLS *tls.Config // accepted connections (nil: plaintext)
	clientTLS *tls.Config // dialled connections
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// newStreamLayer wraps ln. With TLS, serverTLS secures accepted connections
// and clientTLS dialled ones; both are mutual, so a plaintext peer is
// refused in the handshake.
func newStreamLayer(ln net.Listener, advertise string, serverTLS, clientTLS *tls.Config) (*streamLayer, error) {
	addr, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, err
	}
	return &streamLayer{Listener: ln, advertise: addr, serverTLS: serverTLS, clientTLS: clientTLS}, nil
}

// Accept implements net.Listener: with TLS, the connection handshakes
// (within handshakeTimeout) on its first read or write, in Raft's
// per-connection goroutine rather than in the accept loop.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil || s.serverTLS == nil {
		return c, err
	}
	return &handshakeConn{Conn: tls.Server(c, s.serverTLS)}, nil
}

// Addr returns the advertised address (what peers dial).
func (s *streamLayer) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.clientTLS != nil {
		td := &tls.Dialer{NetDialer: d, Config: s.clientTLS}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return td.DialContext(ctx, "tcp", string(address))
	}
	return d.Dial("tcp", string(address))
}

// handshakeConn is an accepted TLS connection that completes its handshake,
// bounded in time, before the first read or write.
type handshakeConn struct {
	*tls.Conn
	once sync.Once
	err  error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		c.err = c.Conn.HandshakeContext(ctx)
	})
	return c.err
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
