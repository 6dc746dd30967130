//go:build !race

package objstore

// raceEnabled: the race detector is on (slow, memory-hungry tests skip).
const raceEnabled = false
