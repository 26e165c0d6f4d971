//go:build !race

package redlock

// raceDetector: see race_on_test.go.
const raceDetector = false
