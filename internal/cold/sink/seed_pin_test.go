package sink

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpucache/gpucache/internal/cold"
)

// The seed contracts (docs/CONTRACTS.md, "Where the contracts come from")
// fix two sink limits as numbers, not as names:
//
//   - at most 3 write attempts per job (the CPU transfer contract's
//     MAX_WRITE_ATTEMPTS, row "Temporary sink error"; the cold-cache
//     contract's "up to three total attempts");
//   - at most 4,096 retained jobs, pending and failed together (the CPU
//     transfer contract's MAX_SINK_JOBS, row "Shared accounting"; the
//     cold-cache contract's hard ceiling).
//
// The other sink tests read the constants, so they follow a change of them;
// these compare with the seeds' literals, so changing either constant
// fails here. Changing a seed number is a contract change: record it in an
// ADR first, then change these literals.
const (
	seedMaxWriteAttempts = 3    // CPU transfer contract: MAX_WRITE_ATTEMPTS (3)
	seedMaxSinkJobs      = 4096 // CPU transfer contract: MAX_SINK_JOBS (4096)
)

func TestSeedPinnedSinkConstants(t *testing.T) {
	if MaxWriteAttempts != seedMaxWriteAttempts {
		t.Errorf("MaxWriteAttempts = %d, the seed contract fixes %d (seed CPU transfer contract, row Temporary sink error; docs/CONTRACTS.md)", MaxWriteAttempts, seedMaxWriteAttempts)
	}
	if MaxSinkJobs != seedMaxSinkJobs {
		t.Errorf("MaxSinkJobs = %d, the seed contract fixes %d (seed CPU transfer contract, row Shared accounting; docs/CONTRACTS.md)", MaxSinkJobs, seedMaxSinkJobs)
	}
}

// A job that fails transiently on every attempt, while the store answers
// other jobs in the same rounds, is written exactly three times and then
// sits in the failed queue; a fourth drain does not touch it.
func TestSeedSinkGivesUpAfterExactlyThreeAttempts(t *testing.T) {
	s, st := newTestSink(t, Config{})
	j := mkJob("ns", "doomed")
	st.hook = failKey(packKey(j), -1, fault{err: fmt.Errorf("503: %w", cold.ErrUnavailable)})
	id := enqueue(t, s, j)

	for drain := 1; drain <= 5; drain++ {
		other := mkJob("other", fmt.Sprint("healthy", drain)) // answered: the failure is j's own
		enqueue(t, s, other)
		rep := s.DrainReport(bg)
		requirePublished(t, st, other, true)
		tries := min(drain, 3)
		if n := st.putsOf(packKey(j)); n != tries {
			t.Fatalf("drain %d: the failing pack was put %d times, want %d (3 attempts in all)", drain, n, tries)
		}
		got := s.Stats()
		switch {
		case drain < 3:
			if got.Failed != 0 || got.Pending != 1 || rep.Retried != 1 {
				t.Fatalf("drain %d (attempt %d of 3): stats %+v, report %+v; want the job pending, one retry", drain, drain, got, rep)
			}
		case drain == 3:
			if got.Failed != 1 || got.Pending != 0 || rep.Failed != 1 || !errors.Is(rep.Err, ErrRetriesExhausted) {
				t.Fatalf("drain 3 (the third attempt): stats %+v, report %+v; want the job failed with ErrRetriesExhausted", got, rep)
			}
		default:
			if got.Failed != 1 || rep.Attempted != 1 {
				t.Fatalf("drain %d: stats %+v, report %+v; want only the healthy job attempted", drain, got, rep)
			}
		}
	}
	f := s.TakeFailed()
	if len(f) != 1 || f[0].Job.ID != id || f[0].Attempts != 3 {
		t.Fatalf("TakeFailed %+v, want the one job with 3 attempts", f)
	}
}

// The job ceiling holds whatever Config.MaxJobs asks for: 4096 jobs are
// admitted, the 4097th is refused with ErrFull, and a failed job holds its
// slot like a pending one.
func TestSeedSinkRefusesThe4097thJob(t *testing.T) {
	for _, asked := range []int{4097, 1 << 20} {
		t.Run(fmt.Sprint("MaxJobs=", asked), func(t *testing.T) {
			s, _ := newTestSink(t, Config{MaxJobs: asked})
			if got := s.Stats().MaxJobs; got != 4096 {
				t.Fatalf("Config.MaxJobs %d became %d, want the 4096 ceiling", asked, got)
			}
			for i := range 4096 {
				if _, err := s.Enqueue(mkJob(fmt.Sprint("ns", i%5), fmt.Sprint(i))); err != nil {
					t.Fatalf("job %d of 4096: %v", i+1, err)
				}
			}
			if _, err := s.Enqueue(mkJob("ns", "4097th")); !errors.Is(err, ErrFull) {
				t.Fatalf("4097th job: %v, want ErrFull", err)
			}
			if got := s.Stats(); got.Jobs != 4096 || got.RejectedFull != 1 {
				t.Fatalf("stats %+v, want 4096 jobs held and one refusal", got)
			}
		})
	}
	t.Run("failed jobs count", func(t *testing.T) {
		s, st := newTestSink(t, Config{MaxJobs: 1 << 20})
		st.hook = failKey(packKey(mkJob("ns", "denied")), -1, fault{err: errDenied})
		enqueue(t, s, mkJob("ns", "denied"))
		if err := s.Drain(bg); !errors.Is(err, errDenied) {
			t.Fatalf("Drain: %v, want the denial", err)
		}
		if got := s.Stats(); got.Failed != 1 {
			t.Fatalf("stats %+v, want one failed job", got)
		}
		for i := range 4095 {
			if _, err := s.Enqueue(mkJob(fmt.Sprint("ns", i%5), fmt.Sprint(i))); err != nil {
				t.Fatalf("job %d of 4096 (one failed held): %v", i+2, err)
			}
		}
		if _, err := s.Enqueue(mkJob("ns", "4097th")); !errors.Is(err, ErrFull) {
			t.Fatalf("4097th job with a failed job held: %v, want ErrFull", err)
		}
	})
}
