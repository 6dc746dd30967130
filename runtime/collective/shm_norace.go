//go:build !race

package collective

func raceLock()   {}
func raceUnlock() {}
