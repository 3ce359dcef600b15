//go:build race

package gitsync_test

// raceDetector says whether the tests run with the race detector, which
// changes what they allocate.
const raceDetector = true
