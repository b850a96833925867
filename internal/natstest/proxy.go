package natstest

import (
	"net"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to target and stands for the network
// path between a client and the bus: Cut closes every connection and
// refuses new ones (a reset); Silence keeps every socket open but
// forwards nothing, in either direction, closes included (packets
// dropped), until Heal delivers what was held, as TCP's retransmits would.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	mode    string        // "forward", "cut" or "silent"
	healed  chan struct{} // closed when forwarding resumes
	conns   map[net.Conn]struct{}
	stopped bool
}

// NewProxy starts a proxy to target (host:port) on a random loopback
// port, stopped by t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, mode: "forward", healed: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.healed)
	go p.accept()
	t.Cleanup(p.stop)
	return p
}

// URL is the proxy's nats:// URL.
func (p *Proxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.mode == "cut" || p.stopped
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst while forwarding; while silent it holds what it
// read (and an end of stream) until the path heals.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.wait() {
			break
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// wait blocks while the path is silent; false once it is cut or stopped.
func (p *Proxy) wait() bool {
	for {
		p.mu.Lock()
		mode, healed, stopped := p.mode, p.healed, p.stopped
		p.mu.Unlock()
		switch {
		case stopped || mode == "cut":
			return false
		case mode == "forward":
			return true
		}
		<-healed
	}
}

func (p *Proxy) set(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mode == "forward" {
		close(p.healed)
	} else if p.mode == "forward" {
		p.healed = make(chan struct{})
	}
	p.mode = mode
	if mode == "cut" {
		p.closeAll()
	}
}

// closeAll closes every connection; p.mu is held.
func (p *Proxy) closeAll() {
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// Cut closes every connection and refuses new ones until Heal.
func (p *Proxy) Cut() { p.set("cut") }

// Silence holds every byte, both ways, until Heal.
func (p *Proxy) Silence() { p.set("silent") }

// Heal forwards again (and what Silence held).
func (p *Proxy) Heal() { p.set("forward") }

func (p *Proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.mode != "forward" {
		close(p.healed)
	}
	p.mode = "forward"
	p.closeAll()
}
