package redlock

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

var (
	scriptAcquire = newScript("acquire.lua")
	scriptRelease = newScript("release.lua")
	scriptExtend  = newScript("extend.lua")
	scriptRaise   = newScript("raise.lua")
	scriptHandOff = newScript("handoff.lua")
	scriptInspect = newScript("inspect.lua")
	scriptPTTL    = newScript("pttl.lua")

	// allScripts are loaded into each node's cache when a Locker or Redlock
	// is made, so the first call pays no NOSCRIPT round trip.
	allScripts = []*redis.Script{scriptAcquire, scriptRelease, scriptExtend, scriptRaise, scriptHandOff, scriptInspect, scriptPTTL}
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// newScript loads an embedded script. go-redis runs it with EVALSHA and falls
// back to EVAL on NOSCRIPT, so a SCRIPT FLUSH, a restart or a failover to a
// node with an empty script cache costs one extra round trip, never an error.
func newScript(name string) *redis.Script {
	src, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic("redlock: missing embedded script " + name) // a build defect, not a runtime condition
	}
	return redis.NewScript(string(src))
}
