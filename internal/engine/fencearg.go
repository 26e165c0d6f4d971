package engine

import (
	"strconv"

	"github.com/redlockgo/redlock/internal/scripts"
)

// fenceArg is the scripts' fencing argument for cfg: "0" without fencing,
// else the fence counter's retention in ms, "1" standing for the default (a
// constant: no allocation).
func fenceArg(cfg *Config) any {
	switch {
	case !cfg.Fencing:
		return "0"
	case cfg.Retention == scripts.DefaultFenceRetention:
		return "1"
	}
	return retentionArg(cfg)
}

// retentionArg is the fence counter's retention in ms as the scripts take
// it, 1 standing for the default (fenceArg).
func retentionArg(cfg *Config) int64 {
	if cfg.Retention == scripts.DefaultFenceRetention {
		return 1
	}
	return cfg.Retention.Milliseconds()
}

// floorArg is acquire.lua's fencing argument with the token's time floor
// after a colon, "<retention>:<floor µs>" (fenceArg's retention), or the
// floor alone for the default retention when it is at least 10^15 (every
// clock since 2001) and below 2^53: acquire.lua reads that form with one
// tonumber instead of splitting it, about 3% of an uncontended pair's
// server work (BENCHMARKS.md). It is kept in the Lock: go-redis writes it
// through MarshalBinary from a pointer, so that it costs no allocation,
// and hooks print it through String.
type floorArg struct {
	n int
	b [44]byte
}

// bareFloorMin and bareFloorEnd bound the floors sent without a retention.
const bareFloorMin, bareFloorEnd = 1_000_000_000_000_000, 1 << 53

func (f *floorArg) set(cfg *Config, floor int64) {
	if ret := retentionArg(cfg); ret != 1 || floor < bareFloorMin || floor >= bareFloorEnd {
		f.n = len(strconv.AppendInt(append(strconv.AppendInt(f.b[:0], ret, 10), ':'), floor, 10))
		return
	}
	f.n = len(strconv.AppendInt(f.b[:0], floor, 10))
}

func (f *floorArg) MarshalBinary() ([]byte, error) { return f.b[:f.n], nil }

func (f *floorArg) String() string { return string(f.b[:f.n]) }
