package bench

import (
	"syscall"
	"time"
)

const fineSleepSupported = true

// fineSleepMax is the longest wait PacerFine sleeps in a system call;
// longer waits use a Go timer.
const fineSleepMax = 2 * time.Millisecond

// fineSleep sleeps for d in a nanosleep system call, which wakes within
// tens of microseconds (a Go timer shorter than a millisecond wakes up to a
// millisecond late: the runtime's poller waits in whole milliseconds). The
// goroutine keeps its P while it sleeps, until the runtime's monitor hands
// the P to other work.
func fineSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil)
}
