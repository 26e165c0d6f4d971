// Package bench compares github.com/redlockgo/redlock with other Redis lock
// libraries (redsync, redislock, rueidislock) against real redis-server
// processes that the benchmarks start on free loopback ports.
//
// It is a separate module so that the competitors never become dependencies
// of the library. The benchmarks live in _test.go files, ./summarize turns
// their output into Markdown tables, and ./run.sh runs both (see
// BENCHMARKS.md at the repository root). CI only runs go vet here.
package bench
