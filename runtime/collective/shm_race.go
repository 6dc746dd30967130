//go:build race

package collective

import "sync"

// The race detector does not see the order that the rings' atomics on
// shared memory give (it tracks Go's memory only), so in race builds each
// publication and each look at a ring's head or tail also holds a mutex:
// then it sees that a payload was written before it was read.
var shmRaceMu sync.Mutex

func raceLock()   { shmRaceMu.Lock() }
func raceUnlock() { shmRaceMu.Unlock() }
