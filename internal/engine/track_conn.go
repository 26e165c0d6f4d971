package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
)

// trackConn is one node's tracking connections: the listener, and its
// data connection of the moment.
type trackConn struct {
	t   *Tracker
	idx int
	cl  *redis.Client
	// hooks routes the data connection's calls through the node's client,
	// so that its hooks see them (node.DivertedClient).
	hooks *node.DivertedClient
	// dial is the Sentinel client's dialer, which dials the master of the
	// moment; nil for a client of one address. remote is the address the
	// listener last reached through it.
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	addr   string
	remote atomic.Pointer[string]
	ps     *redis.PubSub // while armed (the keeper's)
	stop   chan struct{} // closed when the armed connection is closed
	gone   atomic.Bool   // the server refused tracking: never armed again
	subID  atomic.Int64  // the listener's CLIENT ID, since it last connected
	// Data is the data connection of the listener's current subscription,
	// nil while there is none; dataOpt its client's options.
	Data    atomic.Pointer[dataConn]
	dataOpt redis.Options

	mu     sync.Mutex
	armErr error // the last OnConnect's error
}

// dataConn is a node's data connection: one connection (PoolSize 1), so
// that NOLOOP keeps every write of its own silent, whose tracking
// redirects to the listener's id of the moment it was made.
type dataConn struct {
	cl *redis.Client
	// via is cl reached through the client's hooks (node.DivertedClient.through):
	// what renewals and reads use, so that the hooks see them.
	via *node.BoundedClient
	// up: its last call did not fail on the connection; while false,
	// renewals and reads use the pool, and the keeper tries it again.
	up      atomic.Bool
	Conns   atomic.Int32 // connections made
	probing atomic.Bool
	used    atomic.Int64 // when a call on it last ended (UnixNano)
}

// newTrackConn makes the client of one node's listener, and the options
// of its data connections: the node client's options (address, dialer,
// credentials, TLS; a Sentinel client's dialer follows the master), RESP2,
// the names redlock-tracking and redlock-tracking-data; the listener learns
// its id on every new connection before it subscribes.
func newTrackConn(t *Tracker, idx int, base *redis.Client) *trackConn {
	tc := &trackConn{t: t, idx: idx, hooks: node.DivertedOf(base)}
	opt := *base.Options()
	opt.Protocol = 2
	opt.ClientName = "redlock-tracking"
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns = 1, 0, 0
	// No pool for pipelines apart (go-redis from v9.23 has one unless told
	// otherwise): the data connection's pipelined reads and renewals and
	// its keeper's PING must share its one socket, or the PING probes a
	// connection that tracks nothing.
	opt.PipelinePoolSize = -1
	tc.dataOpt = opt
	tc.dataOpt.ClientName = "redlock-tracking-data"
	tc.dataOpt.MaxIdleConns = 1
	// One connection for as long as it works: a new one must arm every
	// held lock again. Calls are bounded by their ctx (the node timeout).
	tc.dataOpt.ConnMaxIdleTime, tc.dataOpt.ConnMaxLifetime = -1, 0
	tc.dataOpt.ContextTimeoutEnabled = true
	prev := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		var err error
		if prev != nil {
			err = prev(ctx, cn)
		}
		var id int64
		if err == nil {
			id, err = cn.ClientID(ctx).Result()
		}
		if err == nil {
			tc.subID.Store(id)
		}
		tc.setArmErr(err)
		return err
	}
	if d := node.SentinelDialer(base); d != nil {
		// go-redis's Sentinel client: its dialer follows the master. The
		// listener stays on the old master after a failover
		// until the sentinels reconfigure it; the keeper compares where a
		// fresh dial lands (masterMoved) and moves it.
		tc.dial, tc.addr = d, opt.Addr
		opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			cn, err := tc.dial(ctx, network, addr)
			if err == nil {
				a := cn.RemoteAddr().String()
				tc.remote.Store(&a)
			}
			return cn, err
		}
	}
	tc.cl = redis.NewClient(&opt)
	return tc
}

// run subscribes one node's listener and reads it until it is
// closed.
func (tc *trackConn) run(ps *redis.PubSub, stop <-chan struct{}) {
	t := tc.t
	defer t.life.WG.Done()
	closed := func() bool {
		select {
		case <-stop:
			return true
		default:
			return t.ctx.Err() != nil
		}
	}
	_ = ps.Subscribe(t.ctx, InvalidateChannel) // on failure, Receive reconnects and subscribes
	for {
		msg, err := ps.Receive(t.ctx)
		if closed() {
			return
		}
		if err != nil {
			if !tc.receiveFailed(err, stop) {
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			// (Re)connected: a data connection that tells this one; what
			// changed while no connection listened was not heard, and
			// credits of writes made before may have no invalidation to
			// meet. Every held lock is read on the new data connection,
			// which arms it.
			if closed() {
				return
			}
			tc.newData(stop)
			t.forgetCredits()
			t.suspectAll()
		case *redis.Message:
			if m.Channel == InvalidateChannel {
				t.Heard.Add(int64(len(m.PayloadSlice)))
				t.invalidated(tc.idx, m.PayloadSlice)
			}
		}
	}
}

// receiveFailed takes an error of the listener's Receive, and reports
// whether to receive again: not once the server has refused tracking, nor
// once the listener is stopped or the tracker closed.
func (tc *trackConn) receiveFailed(err error, stop <-chan struct{}) bool {
	t := tc.t
	if tc.refused() {
		t.logger.Debug("redlock: the server refuses CLIENT TRACKING; a lost lock is found at its next renewal",
			"node", tc.idx, "err", tc.armError())
		t.giveUp(tc)
		return false
	}
	if !connErr(err) {
		// A message go-redis cannot parse: the invalidation of a
		// whole database (FLUSHALL, FLUSHDB) has no key list.
		t.suspectAll()
		return true
	}
	t.forgetCredits() // invalidations may have been lost
	pause := time.NewTimer(50 * time.Millisecond)
	select {
	case <-stop:
		pause.Stop()
		return false
	case <-t.ctx.Done():
		pause.Stop()
		return false
	case <-pause.C:
	}
	return true
}

// refused reports that the server answered the tracking set-up with an
// error (an old server, miniredis, an ACL without CLIENT): retrying cannot
// help.
func (tc *trackConn) refused() bool {
	var rerr redis.Error
	return errors.As(tc.armError(), &rerr)
}

func (tc *trackConn) setArmErr(err error) {
	tc.mu.Lock()
	tc.armErr = err
	tc.mu.Unlock()
}

func (tc *trackConn) armError() error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.armErr
}

// connErr reports whether err is the connection's (closed, reset, timed
// out), not a message's.
func connErr(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrClosed) || errors.As(err, &ne) || errors.As(err, new(redis.Error))
}

// masterMoved reports that a fresh dial of a Sentinel client reaches
// another address than the listener: a failover happened. The
// dial is a TCP connection closed at once, no command.
func (tc *trackConn) masterMoved(ctx context.Context) bool {
	was := tc.remote.Load()
	if tc.dial == nil || was == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, FollowEvery)
	defer cancel()
	cn, err := tc.dial(ctx, "tcp", tc.addr)
	if err != nil {
		return false
	}
	now := cn.RemoteAddr().String()
	_ = cn.Close()
	return now != *was
}

// newData replaces the node's data connection by one whose tracking
// redirects to the listener's current id (run, when it has (re)subscribed:
// the old one's invalidations went to a connection that is gone). It
// connects on its first call.
func (tc *trackConn) newData(stop <-chan struct{}) {
	dc := &dataConn{}
	dc.up.Store(true)
	redirect := tc.subID.Load()
	replacing := tc.Data.Load() != nil
	opt := tc.dataOpt
	prev := opt.OnConnect
	opt.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
		var err error
		if prev != nil {
			err = prev(ctx, cn)
		}
		if err == nil {
			err = cn.Do(ctx, "client", "tracking", "on", "redirect", redirect, "noloop").Err()
		}
		if err != nil {
			// A redirect to a listener that is gone (it reconnected
			// meanwhile) is no refusal: its new subscription brings a new
			// data connection.
			if node.IsServerError(err) && !strings.Contains(strings.ToLower(err.Error()), "redirect") {
				tc.setArmErr(err)
				tc.t.logger.Debug("redlock: the server refuses CLIENT TRACKING; a lost lock is found at its next renewal",
					"node", tc.idx, "err", err)
				tc.t.giveUp(tc)
			}
			return err
		}
		dc.up.Store(true)
		n := dc.Conns.Add(1)
		if n > 1 || replacing {
			tc.t.dataConnected.Store(time.Now().UnixNano())
		}
		if n > 1 {
			// A new connection tracks nothing yet: arm every held lock
			// again (and read it: what changed meanwhile was not heard).
			tc.t.suspectAll()
		}
		return nil
	}
	dc.cl = redis.NewClient(&opt)
	dc.via = tc.hooks.Through(dc.cl)
	if old := tc.Data.Swap(dc); old != nil {
		_ = old.cl.Close()
	}
	select {
	case <-stop: // disarmed or moved meanwhile: its closeData may have come first
		tc.closeData()
	default:
	}
}

// closeData closes the node's data connection.
func (tc *trackConn) closeData() {
	if old := tc.Data.Swap(nil); old != nil {
		_ = old.cl.Close()
	}
}

// dataClient is the node's data connection if it is up, else nil.
func (tc *trackConn) dataClient() *dataConn {
	if tc == nil || tc.gone.Load() {
		return nil
	}
	if dc := tc.Data.Load(); dc != nil && dc.up.Load() {
		return dc
	}
	return nil
}

// failed records a call on dc that ended in err: an error of the
// connection (not a reply) puts dc down until the keeper's probe.
func (dc *dataConn) failed(err error) {
	if err != nil && !node.IsServerError(err) && !errors.Is(err, redis.Nil) {
		dc.up.Store(false)
	}
}

// probe tries a data connection that is down, or one that is up but has
// not been used for IdlePing (a connection killed while idle would
// otherwise lose its invalidations unnoticed until the next renewal), once
// at a time, bounded by FollowEvery; a new connection arms every held lock
// again (OnConnect).
func (tc *trackConn) probe() {
	dc := tc.Data.Load()
	if dc == nil || tc.gone.Load() {
		return
	}
	up := dc.up.Load()
	if up && time.Since(time.Unix(0, dc.used.Load())) < IdlePing || !dc.probing.CompareAndSwap(false, true) {
		return
	}
	if !tc.t.life.GoCount(1) {
		dc.probing.Store(false)
		return
	}
	go func() {
		defer tc.t.life.WG.Done()
		defer dc.probing.Store(false)
		ctx, cancel := context.WithTimeout(tc.t.ctx, FollowEvery)
		defer cancel()
		err := dc.cl.Ping(ctx).Err()
		dc.used.Store(time.Now().UnixNano())
		if up {
			if err != nil && ctx.Err() == nil {
				dc.failed(err) // not merely busy: broken
			}
			return
		}
		if err == nil && !dc.up.Swap(true) {
			// Same connection: what it tracked it still tracks (the pool's
			// renewals meanwhile were told, and read again). The locks read
			// through the pool meanwhile are not armed yet.
			tc.t.armUnarmed()
		}
	}()
}
