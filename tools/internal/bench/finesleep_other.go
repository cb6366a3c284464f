//go:build !linux

package bench

import "time"

const fineSleepSupported = false

const fineSleepMax = 2 * time.Millisecond

func fineSleep(d time.Duration) { time.Sleep(d) }
