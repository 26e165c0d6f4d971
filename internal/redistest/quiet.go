package redistest

import (
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// QuietGoRedis turns off go-redis's package-wide logger; call it from
// TestMain before m.Run. Tests that kill, pause or refuse servers on purpose
// make every pool on them redial in the background, and go-redis prints each
// failed dial ("connection pool: failed to dial after 5 attempts") and each
// Sentinel switch to stderr: some 250 lines per run of the suite that say
// only what the tests did, and that bury a real failure. The tests read the
// errors their calls return instead; none asserts on go-redis's log.
func QuietGoRedis() { redis.SetLogger(&logging.VoidLogger{}) }
