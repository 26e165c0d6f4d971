//go:build race

package redlock

// raceDetector: the tests run under the race detector, whose instrumentation
// makes every memory access and atomic operation many times dearer.
const raceDetector = true
