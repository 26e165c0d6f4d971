package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestFloorArgForms: acquire.lua's fencing argument is the floor alone only
// for the default retention and a floor in [10^15, 2^53), which the script
// tells from every retention by its size; any other floor, and any other
// retention, goes as "<retention>:<floor>" ("1" for the default).
func TestFloorArgForms(t *testing.T) {
	def := DefaultConfig()
	hour := DefaultConfig()
	hour.Retention = time.Hour
	for _, tc := range []struct {
		cfg   *Config
		floor int64
		want  string
	}{
		{&def, 1_796_617_821_794_767, "1796617821794767"},
		{&def, 1_000_000_000_000_000, "1000000000000000"},
		{&def, 999_999_999_999_999, "1:999999999999999"},
		{&def, 1<<53 - 1, "9007199254740991"},
		{&def, 1 << 53, "1:9007199254740992"},
		{&hour, 1_796_617_821_794_767, "3600000:1796617821794767"},
	} {
		var f floorArg
		f.set(tc.cfg, tc.floor)
		assert.Equal(t, tc.want, f.String(), "floor %d, retention %v", tc.floor, tc.cfg.Retention)
		b, err := f.MarshalBinary()
		assert.NoError(t, err)
		assert.Equal(t, tc.want, string(b))
	}
}
