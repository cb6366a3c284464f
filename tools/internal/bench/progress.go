package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reports a run on a writer (stderr). On a terminal it redraws a
// one-line bar while a case runs; otherwise it prints a plain line per case
// and per note. A nil *progress prints nothing.
type progress struct {
	w   io.Writer
	tty bool

	mu      sync.Mutex    // serialises writes
	stop    chan struct{} // closes the current bar's goroutine
	stopped chan struct{}
}

func newProgress(w io.Writer, tty bool) *progress {
	if w == nil {
		return nil
	}
	return &progress{w: w, tty: tty}
}

// barWidth is the bar's width in cells.
const barWidth = 30

// begin starts the bar of case index (1-based) of total. frac reports the
// case's completion in [0,1] and the blocks done so far.
func (p *progress) begin(label string, index, total int, frac func() (float64, uint64)) {
	if p == nil || !p.tty {
		return
	}
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			f, blocks := frac()
			p.draw(label, index, total, f, float64(blocks)/max(time.Since(start).Seconds(), 1e-9))
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
}

func (p *progress) draw(label string, index, total int, f, rate float64) {
	f = min(max(f, 0), 1)
	n := int(f * barWidth)
	bar := strings.Repeat("=", n) + strings.Repeat(" ", barWidth-n)
	if n > 0 && n < barWidth {
		bar = bar[:n-1] + ">" + bar[n:]
	}
	p.mu.Lock()
	fmt.Fprintf(p.w, "\r\x1b[K[%s] %3.0f%% case %d/%d %s  %s blocks/s", bar, f*100, index, total, label, fmtRate(rate))
	p.mu.Unlock()
}

// end stops the bar and prints the case's summary line.
func (p *progress) end(index, total int, r *CaseResult) {
	if p == nil {
		return
	}
	if p.tty && p.stop != nil {
		close(p.stop)
		<-p.stopped
		p.stop = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, "case %d/%d %s\n", index, total, r.line())
}

// note prints a line.
func (p *progress) note(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}
