//go:build jepsen && linux

package jepsen

import (
	"io"
	"net"
	"sync"
	"time"
)

// delayProxy forwards TCP from a replica to one server through the harness,
// delaying every byte the server sends back by a fixed time. This kernel
// has no netem, and the negative control "time the lease from receipt"
// needs answers that arrive well after the coordinator committed them.
// Cut closes every connection and refuses new ones until Uncut.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newDelayProxy(listen, target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); io.Copy(s, c); s.Close(); c.Close() }()
		go func() { defer p.wg.Done(); p.delayed(c, s); s.Close(); c.Close() }()
	}
}

// delayed copies src to dst, each chunk released delay after it was read.
func (p *delayProxy) delayed(dst, src net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{time.Now().Add(p.delay), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			hold(d) // the injected delay itself
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// Cut drops every connection and refuses new ones; Uncut restores service.
func (p *delayProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *delayProxy) Uncut() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *delayProxy) Close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
