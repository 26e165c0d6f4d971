package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redlockgo/redlock/internal/node"
)

// Client is the part of a go-redis client the library uses: scripts,
// pipelines (renewals, releases at Close, INFO), and SUBSCRIBE for waiting.
// *redis.Client (standalone or the Sentinel failover client),
// *redis.ClusterClient and *redis.Ring all satisfy it, and so does
// redis.UniversalClient and any wrapper of your own that provides these
// methods (redis.Scripter is what go-redis's Script needs to run).
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = redis.UniversalClient(nil)
)

// The engine's own declaration of Client (internal/node) has the same
// methods: either converts to the other.
var (
	_ node.Client = Client(nil)
	_ Client      = node.Client(nil)
)
