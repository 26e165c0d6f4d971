package redistest

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// proxyDialTimeout bounds the proxy's connection to its target.
	proxyDialTimeout = time.Second

	// proxyChunkSize is the most a proxy forwards in one write.
	proxyChunkSize = 32 << 10

	// proxyQueueLen is how many chunks may wait out the delay in each
	// direction of a connection before the proxy stops reading, so that
	// a delayed direction applies backpressure instead of buffering
	// without limit.
	proxyQueueLen = 64
)

// Proxy is a TCP proxy on 127.0.0.1 between clients and one server, to
// inject latency, network partitions and lost replies. Every accepted
// connection gets its own connection to the target. Its methods are safe
// for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	delay     atomic.Int64 // time.Duration added to server->client data
	blackhole atomic.Bool

	dropMu sync.Mutex
	drops  int // replies still to drop, see DropReplies

	holdMu sync.Mutex
	// gate is closed while server->client data flows, and open (blocking
	// the writers) while Hold is on; Hold(false) closes it.
	gate chan struct{}

	// ctx is cancelled by Close, to abort dials to the target in flight.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	links  map[*link]struct{}

	wg        sync.WaitGroup // the accept loop and every connection's goroutines
	closeOnce sync.Once
}

// NewProxy starts a proxy on a free port of 127.0.0.1 that forwards to
// target, which must be a loopback address other than the default Redis
// port. A cleanup registered on t closes it.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatalf("redistest: NewProxy: bad target %q: %v", target, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("redistest: NewProxy: target %q is not a loopback IP address", target)
	}
	if port == strconv.Itoa(defaultRedisPort) {
		t.Fatalf("redistest: NewProxy: refusing target %q: port %d may be a server this package did not start",
			target, defaultRedisPort)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(loopbackHost, "0"))
	if err != nil {
		t.Fatalf("redistest: NewProxy: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target: target,
		ln:     ln,
		ctx:    ctx,
		cancel: cancel,
		links:  make(map[*link]struct{}),
		gate:   closedGate,
	}
	p.wg.Go(p.acceptLoop)
	t.Cleanup(p.Close)
	return p
}

// Addr returns the address clients connect to, "127.0.0.1:PORT".
func (p *Proxy) Addr() string {
	return p.ln.Addr().String()
}

// SetDelay holds each chunk of data travelling from the server to the
// client for d before forwarding it, to simulate a slow network or a slow
// server. It applies to data the proxy reads after the call; data read
// earlier keeps the delay it was read with. Zero or a negative d removes
// the delay.
func (p *Proxy) SetDelay(d time.Duration) {
	p.delay.Store(int64(max(d, 0)))
}

// Blackhole turns a network partition on or off. While it is on, data in
// both directions is read and dropped, and so is data still held back by
// SetDelay, but connections stay open and new ones are accepted: to both
// sides the peer just stops answering, as with a partition rather than a
// crash. Data dropped is not delivered when the partition ends.
func (p *Proxy) Blackhole(on bool) {
	p.blackhole.Store(on)
}

// DropReplies makes the proxy lose the next n replies after the server has
// sent them, so that a test can check what a client does when a command
// was executed but its reply never arrived, for example that a command
// retried by the client is idempotent.
//
// Each of the next n times the proxy reads data from the server, on any
// connection, it discards that data and closes the connection, on both
// sides. Data read from the server is a chunk, what one read returned:
// normally one reply, but it can be several pipelined replies or only the
// beginning of a large one. Data that connection received from the server
// earlier is delivered first (after its SetDelay delay, if any); data the
// server sends after the chunk is discarded too, and does not count
// towards n. What the client sent before the chunk has been forwarded to
// the server, so the client sees its connection end (EOF) after the
// server has executed its command. A client that retries on a new
// connection sends the command again, and the new connection works
// normally unless drops are still pending.
//
// A chunk counts when the proxy reads it, and not while a partition
// (Blackhole) is on, since the partition drops it anyway. Every chunk
// counts, including replies to the commands a client sends when it sets
// up a connection (go-redis sends HELLO): to lose the reply to a
// particular command, make sure the client has its connection first, for
// example with a PING, and then call DropReplies. For the same reason,
// with n > 1 a client that retries on a new connection loses the reply to
// its handshake, not to the command, and does not send the command on
// that connection. Each call replaces the number of drops pending;
// DropReplies(0) cancels them.
func (p *Proxy) DropReplies(n int) {
	p.dropMu.Lock()
	defer p.dropMu.Unlock()
	p.drops = max(n, 0)
}

// takeDrop reports whether the chunk just read from a server must be
// dropped, and if so uses up one of the drops pending.
func (p *Proxy) takeDrop() bool {
	p.dropMu.Lock()
	defer p.dropMu.Unlock()
	if p.drops == 0 {
		return false
	}
	p.drops--
	return true
}

// closedGate is the gate of a proxy that holds nothing back.
var closedGate = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// Hold turns holding server->client data on or off. While it is on, data
// the server sends is read and queued (up to the proxy's queue, then TCP
// backpressure) but not delivered; Hold(false) delivers everything queued,
// in order. Data from the client still reaches the server, so commands run
// while their replies wait, as for replies stuck in a network buffer or a
// client paused after sending. Between a master and a replica that
// connects through the proxy, Hold holds back the replication stream: the
// replica neither receives nor acknowledges writes (WAIT counts no ack)
// until the hold ends. Blackhole, Cut or Close drop what was held.
func (p *Proxy) Hold(on bool) {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	held := p.gate != closedGate
	switch {
	case on && !held:
		p.gate = make(chan struct{})
	case !on && held:
		close(p.gate)
		p.gate = closedGate
	}
}

// held returns the channel a writer of server->client data waits on: closed
// unless Hold is on.
func (p *Proxy) held() <-chan struct{} {
	p.holdMu.Lock()
	defer p.holdMu.Unlock()
	return p.gate
}

// Cut closes every connection through the proxy at once, with a TCP reset
// (SO_LINGER 0) to the client, as when a network device or the server's
// host drops the connection in the middle of a command: a command already
// forwarded may have run, and data not yet forwarded in either direction,
// held data included, is lost. New connections are accepted as usual.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.reset()
	}
}

// Conns returns the number of connections through the proxy right now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops the proxy, closes every connection through it and returns
// once all of its goroutines have ended. It is safe to call more than once.
func (p *Proxy) Close() {
	p.closeOnce.Do(func() {
		p.cancel()
		_ = p.ln.Close()
		p.mu.Lock()
		p.closed = true
		for l := range p.links {
			l.close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// acceptLoop accepts client connections until the listener is closed.
func (p *Proxy) acceptLoop() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			// Close closed the listener. Any other error on a loopback
			// listener (such as running out of file descriptors) would
			// recur at once; stopping turns it into a visible test
			// failure instead of a busy loop.
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

// serve connects client to the target and copies data both ways until
// either side closes or the proxy is closed.
func (p *Proxy) serve(client net.Conn) {
	d := net.Dialer{Timeout: proxyDialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		// The client sees its connection closed, as it would see a
		// refused one had it dialled the server directly.
		_ = client.Close()
		return
	}
	l := &link{client: client, server: server, done: make(chan struct{})}
	if !p.track(l) {
		l.close()
		return
	}
	defer p.untrack(l)

	var wg sync.WaitGroup
	wg.Go(func() { p.pipe(l, server, client, func() time.Duration { return 0 }, nil, nil) })
	wg.Go(func() {
		p.pipe(l, client, server, func() time.Duration { return time.Duration(p.delay.Load()) }, p.takeDrop, p.held)
	})
	wg.Wait()
}

// pipe copies data from src to dst, holding each chunk for the delay
// current when it was read. A reading and a writing goroutine are needed
// so that the delay of one chunk does not postpone reading the next one:
// each chunk must be held d, not d plus the delays of the chunks before it.
//
// If drop is not nil, it is called for each chunk read, and when it
// reports true the chunk is not forwarded: the link is closed when the
// chunk's turn comes, and nothing more is read from src (see DropReplies).
//
// If held is not nil, each chunk waits, after its delay, until the channel
// held returns is closed (see Hold).
func (p *Proxy) pipe(l *link, dst, src net.Conn, delay func() time.Duration, drop func() bool, held func() <-chan struct{}) {
	type chunk struct {
		data []byte
		due  time.Time
		drop bool // close the link instead of forwarding data
	}
	queue := make(chan chunk, proxyQueueLen)

	var wg sync.WaitGroup
	wg.Go(func() {
		// Ends on EOF, or when a teardown closes the connections.
		defer close(queue)
		buf := make([]byte, proxyChunkSize)
		for {
			n, err := src.Read(buf)
			if n > 0 && !p.blackhole.Load() {
				c := chunk{data: bytes.Clone(buf[:n]), due: time.Now().Add(delay())}
				c.drop = drop != nil && drop()
				select {
				case queue <- c:
				case <-l.done:
					return
				}
				if c.drop {
					// Anything after the dropped chunk is lost with the
					// link, and must not use up further drops.
					return
				}
			}
			if err != nil {
				return
			}
		}
	})

	// Tear the link down when this direction ends, so that the other
	// direction's Read returns too. Redis connections are not half-closed
	// in practice, so losing half-close semantics costs nothing.
	defer l.close()
	defer wg.Wait()
	for c := range queue {
		// After a teardown or during a partition the remaining chunks are
		// dropped, but the queue is still drained so the reader can end.
		if !l.waitUntil(c.due) {
			continue
		}
		if c.drop {
			l.close()
			continue
		}
		if held != nil {
			select {
			case <-held():
			case <-l.done:
				continue
			}
		}
		if p.blackhole.Load() {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			l.close()
		}
	}
}

// track registers l so that Close can tear it down. It reports false if
// the proxy is already closed.
func (p *Proxy) track(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.links[l] = struct{}{}
	return true
}

func (p *Proxy) untrack(l *link) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.links, l)
}

// link is one proxied connection: a client connection and the proxy's
// connection to the target on its behalf.
type link struct {
	client, server net.Conn
	done           chan struct{} // closed by close
	once           sync.Once
}

// lifecycle.WaitUntil waits until t and reports whether the link is still up.
func (l *link) waitUntil(t time.Time) bool {
	if wait := time.Until(t); wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-l.done:
		}
	}
	select {
	case <-l.done:
		return false
	default:
		return true
	}
}

// reset closes the link with a TCP reset to the client rather than an
// orderly FIN, and the server side normally.
func (l *link) reset() {
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	l.close()
}

// close closes both connections, which ends every Read and Write on them.
func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}
