package prodshape

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// balancer is a round-robin TCP balancer in front of the nodes' frontends,
// as a load balancer is in production: each new connection goes to the
// next frontend that accepts it within a second, so a client whose node
// died reconnects to one that lives. It keeps no state about a node.
type balancer struct {
	ln       net.Listener
	backends []string

	mu    sync.Mutex
	next  int
	conns map[net.Conn]int // the backend each carried connection goes to
	wg    sync.WaitGroup
}

func startBalancer(backends []string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("prodshape: listen for the frontend balancer: %w", err)
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]int{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		in, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.pipe(in)
		}()
	}
}

// pipe connects in to the first backend, from the next in turn, that
// accepts, and copies both ways until either side closes.
func (b *balancer) pipe(in net.Conn) {
	defer in.Close()
	b.mu.Lock()
	start := b.next
	b.next = (b.next + 1) % len(b.backends)
	b.mu.Unlock()
	var out net.Conn
	backend := -1
	for i := range b.backends {
		c, err := net.DialTimeout("tcp", b.backends[(start+i)%len(b.backends)], time.Second)
		if err == nil {
			out, backend = c, (start+i)%len(b.backends)
			break
		}
	}
	if out == nil {
		return // no frontend accepts: the client sees its connection close
	}
	defer out.Close()
	if !b.track(in, backend) {
		return
	}
	defer b.untrack(in)
	// Either side ending ends both (HTTP/2 has no use for a half-closed
	// connection): a dead node's connections close, and its clients dial
	// again.
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(out, in)
	go cp(in, out)
	<-done
	in.Close()
	out.Close()
	<-done
}

func (b *balancer) track(c net.Conn, backend int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		return false
	}
	b.conns[c] = backend
	return true
}

func (b *balancer) untrack(c net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.conns, c)
}

// carried counts the connections open now to each backend.
func (b *balancer) carried() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := make([]int, len(b.backends))
	for _, i := range b.conns {
		n[i]++
	}
	return n
}

// close stops accepting and closes every connection it carries.
func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.conns = nil
	b.mu.Unlock()
	b.wg.Wait()
}
