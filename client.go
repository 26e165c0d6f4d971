package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the library uses. *redis.Client
// (standalone or the Sentinel failover client), *redis.ClusterClient and
// *redis.Ring all satisfy it.
type Client interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
)
