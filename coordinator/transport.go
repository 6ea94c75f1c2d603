package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
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
	advertise advertiseAddr
	serverTLS *tls.Config // accepted connections (nil: plaintext)
	clientTLS *tls.Config // dialled connections
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// advertiseAddr is a host:port as configured, the host an IP or a DNS
// name. It is not resolved here: Raft sends it to peers as this server's
// address, and a name is resolved by whoever dials it, each time, so it
// follows the name to a new IP.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// newStreamLayer wraps ln. With TLS, serverTLS secures accepted connections
// and clientTLS dialled ones; both are mutual, so a plaintext peer is
// refused in the handshake.
func newStreamLayer(ln net.Listener, advertise string, serverTLS, clientTLS *tls.Config) *streamLayer {
	return &streamLayer{Listener: ln, advertise: advertiseAddr(advertise), serverTLS: serverTLS, clientTLS: clientTLS}
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

// Dial implements raft.StreamLayer. address comes from raftAddresses: a
// DNS name in it is resolved here, on every new connection.
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

// raftAddresses is the transport's raft.ServerAddressProvider: a server's
// current Raft address is the one it gossips, found by its ID, and else the
// one the Raft configuration holds. Raft keeps addresses in its
// configuration, which only a leader changes; servers that all came back
// at new addresses would otherwise dial each other's old ones and never
// elect that leader (docs/operations.md, "Moving servers"). Once one leads,
// reconcile writes the gossiped addresses into the configuration.
type raftAddresses struct {
	members *membership
	raft    atomic.Pointer[raft.Raft] // set once Raft is created
}

var _ raft.ServerAddressProvider = (*raftAddresses)(nil)

// errNoRaftAddress: neither gossip nor the configuration knows the server
// (the transport then dials the address Raft asked for).
var errNoRaftAddress = errors.New("server not in gossip or the raft configuration")

// ServerAddr implements raft.ServerAddressProvider.
func (p *raftAddresses) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if addr, ok := p.members.raftAddrOf(string(id)); ok {
		return raft.ServerAddress(addr), nil
	}
	if r := p.raft.Load(); r != nil {
		for _, srv := range r.GetConfiguration().Configuration().Servers {
			if srv.ID == id {
				return srv.Address, nil
			}
		}
	}
	return "", errNoRaftAddress
}
