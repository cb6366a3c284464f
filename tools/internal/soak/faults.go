package soak

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// recoveryPoll is the period of the recovery checks after a heal.
const recoveryPoll = 100 * time.Millisecond

// FaultRecord is what became of one injected fault.
type FaultRecord struct {
	Fault  string `json:"fault"`
	Target string `json:"target"`
	Cycle  int    `json:"cycle"`
	// Means says what "recovered" means for this fault: what the soak
	// checks after the heal.
	Means       string    `json:"recovered_means"`
	InjectedAt  time.Time `json:"injected_at"`
	HealedAt    time.Time `json:"healed_at"`
	RecoveredAt time.Time `json:"recovered_at,omitzero"`
	Recovered   bool      `json:"recovered"`
	// RecoverySec is the time from the heal to the recovery.
	RecoverySec float64 `json:"recovery_s"`
	// Effect is what the soak saw at the end of the hold: evidence that
	// the fault took hold (modes, failpoint hits, bytes of ballast).
	Effect string `json:"effect,omitempty"`
	// Steps says when each condition of the recovery first held, after
	// the heal.
	Steps string `json:"steps,omitempty"`
	// Waiting lists what was still missing when the recovery bound ran out.
	Waiting string `json:"waiting,omitempty"`
	Error   string `json:"error,omitempty"`
	// NotRun says why the fault could not be injected here.
	NotRun string `json:"not_run,omitempty"`
}

// fault is one injectable fault of the soak.
type fault struct {
	name, target, means string
	notRun              string // non-empty: cannot run here, and why
	inject              func(ctx context.Context) error
	// effect describes the fault's effect at the end of the hold.
	effect func(ctx context.Context) string
	heal   func(ctx context.Context) error
	// recovery snapshots what the check compares against, just after the
	// heal, and returns the check: it answers "" once the fault has
	// recovered, else what is still missing.
	recovery func(ctx context.Context) []check
}

// counter reads one figure of a node's /metrics; -1 if it cannot be read.
func (s *soak) counter(ctx context.Context, n *node, name string) float64 {
	_, _, adm := n.snapshot()
	m, err := s.admin.metrics(ctx, adm)
	if err != nil {
		return -1
	}
	return m.get(name)
}

// check is one condition of a recovery: fn answers "" once it holds,
// else what is still missing.
type check struct {
	name string
	fn   func(ctx context.Context) string
}

// grows is a check that a node's counter passes its value at the heal.
func (s *soak) grows(ctx context.Context, n *node, name string) check {
	base := s.counter(ctx, n, name)
	short := strings.TrimPrefix(name, "gpucache_")
	return check{n.spec.name + " " + short + " grows", func(ctx context.Context) string {
		if v := s.counter(ctx, n, name); v < 0 || v <= base {
			return fmt.Sprintf("%s %s still %v", n.spec.name, short, max(v, base))
		}
		return ""
	}}
}

// anyGrows is grows over several nodes: one of them must pass its base.
func (s *soak) anyGrows(ctx context.Context, nodes []*node, name string) check {
	checks := make([]check, len(nodes))
	for i, n := range nodes {
		checks[i] = s.grows(ctx, n, name)
	}
	short := strings.TrimPrefix(name, "gpucache_")
	return check{"a cluster node's " + short + " grows", func(ctx context.Context) string {
		for _, c := range checks {
			if c.fn(ctx) == "" {
				return ""
			}
		}
		return "no cluster node's " + short + " grew"
	}}
}

// live is a check that a cluster node's control plane is live.
func (s *soak) live(n *node) check {
	return check{n.spec.name + " live", func(ctx context.Context) string {
		if m := s.counter(ctx, n, "gpucache_control_mode"); m != 0 {
			return fmt.Sprintf("%s control mode %v (0 is live)", n.spec.name, m)
		}
		return ""
	}}
}

// servesAgain is a check that a node stores and serves hits again.
func (s *soak) servesAgain(ctx context.Context, n *node) []check {
	return []check{s.grows(ctx, n, "gpucache_hot_puts"), s.grows(ctx, n, "gpucache_blocks_hit")}
}

// fullView is a check that every cluster node's view holds every member.
func (s *soak) fullView() check {
	return check{"full view", func(ctx context.Context) string {
		want := []string{}
		for _, n := range s.cluster {
			want = append(want, n.spec.name)
		}
		w := strings.Join(want, ",")
		for _, n := range s.cluster {
			_, _, adm := n.snapshot()
			v, err := s.admin.view(ctx, adm)
			if err != nil {
				return fmt.Sprintf("%s view: %v", n.spec.name, err)
			}
			if v.ids() != w {
				return fmt.Sprintf("%s sees members %s, want %s", n.spec.name, v.ids(), w)
			}
		}
		return ""
	}}
}

// newer is a check that a cold tier wrote a manifest after the heal: the
// newest directory time under root passes the heal time.
func newer(what, root string, since time.Time) check {
	return check{what + " write-behind writes a manifest", func(context.Context) string {
		if t := newestUnder(root); !t.After(since) {
			return "no manifest written under " + root + " since the heal"
		}
		return ""
	}}
}

// modes describes the control modes of the cluster nodes.
func (s *soak) modes(ctx context.Context) string {
	var out []string
	for _, n := range s.cluster {
		out = append(out, fmt.Sprintf("%s mode=%v", n.spec.name, s.counter(ctx, n, "gpucache_control_mode")))
	}
	return strings.Join(out, " ")
}

// faults builds the soak's faults.
func (s *soak) faults() map[string]*fault {
	fs := s.processFaults()
	if s.ns != nil {
		fs[FaultPartition].inject = func(context.Context) error { return s.ns.partition() }
		fs[FaultPartition].heal = func(context.Context) error { return s.ns.heal() }
	} else {
		fs[FaultPartition].notRun = "NOT_RUN: " + s.nsWhy
	}
	if _, mounted, _ := s.disk.state(); !mounted {
		fs[FaultFullDisk].notRun = "NOT_RUN: " + s.diskWhy
	}
	s.addFailpointFaults(fs)
	return fs
}

// processFaults builds the faults done to processes, the disk and the
// network: kill -9, etcd and S3 down, a full disk, a partition (whose
// inject and heal faults sets, with a network namespace).
func (s *soak) processFaults() map[string]*fault {
	n1, n2, open := s.cluster[0], s.cluster[1], s.open
	return map[string]*fault{
		FaultKill9: {
			name: FaultKill9, target: "n1",
			means: "n1 restarted on its port, every cluster node's view holds n1, n2 and n3, n1's control plane is live, and n1 stores and serves hits again",
			inject: func(context.Context) error {
				p, _, _ := n1.snapshot()
				p.kill()
				return nil
			},
			effect: func(context.Context) string {
				p, _, _ := n1.snapshot()
				return fmt.Sprintf("n1 pid %d killed (exit: %v)", p.pid, p.err)
			},
			heal: n1.restart,
			recovery: func(ctx context.Context) []check {
				return append([]check{s.fullView(), s.live(n1)}, s.servesAgain(ctx, n1)...)
			},
		},
		FaultEtcd: {
			name: FaultEtcd, target: "etcd",
			means:  "every cluster node's control plane is live again, every view holds n1, n2 and n3, and every cluster node stores and serves hits again",
			inject: func(context.Context) error { s.etcd.kill(); return nil },
			effect: s.modes,
			heal:   s.etcd.start,
			recovery: func(ctx context.Context) []check {
				checks := []check{s.fullView()}
				for _, n := range s.cluster {
					checks = append(append(checks, s.live(n)), s.servesAgain(ctx, n)...)
				}
				return checks
			},
		},
		FaultS3: {
			name: FaultS3, target: "versitygw",
			means:  "the cluster's write-behind writes a new manifest to S3 after the restart, and a cluster node refills a block from S3 again",
			inject: func(context.Context) error { s.s3.kill(); return nil },
			effect: func(context.Context) string { return "versitygw killed" },
			heal:   s.s3.start,
			recovery: func(ctx context.Context) []check {
				return []check{newer("S3", s.s3Manifests, time.Now()), s.anyGrows(ctx, s.cluster, "gpucache_cold_refill_hits")}
			},
		},
		FaultFullDisk: {
			name: FaultFullDisk, target: "open",
			means: "after the ballast is removed, the open node's write-behind writes a new manifest to its fs cold tier, and the node serves hits again",
			inject: func(context.Context) error {
				n, err := s.disk.fill()
				s.ballast = n
				return err
			},
			effect: func(context.Context) string {
				size, _, _ := s.disk.state()
				return fmt.Sprintf("a %d-byte ballast filled the %d-byte tmpfs", s.ballast, size)
			},
			heal: func(context.Context) error { return s.disk.free() },
			recovery: func(ctx context.Context) []check {
				return []check{newer("open's fs", s.fsManifests, time.Now()), s.grows(ctx, open, "gpucache_blocks_hit")}
			},
		},
		FaultPartition: {
			name: FaultPartition, target: "n2<->etcd",
			means:  "n2's control plane is live again, every view holds n1, n2 and n3, and n2 stores and serves hits again",
			effect: s.modes,
			recovery: func(ctx context.Context) []check {
				return append([]check{s.fullView(), s.live(n2)}, s.servesAgain(ctx, n2)...)
			},
		},
	}
}

// failpoint builds fault name: failpoint fp of node n armed in mode.
func failpoint(name, fp, mode string, n *node, means string, recovery func(ctx context.Context) []check) *fault {
	f := &fault{name: name, target: n.spec.name, means: means, recovery: recovery}
	hits := func() int {
		r, err := n.command("hits " + fp)
		if err != nil {
			return -1
		}
		v, _ := strconv.Atoi(strings.TrimPrefix(r, "ok hits="))
		return v
	}
	var before int
	f.inject = func(context.Context) error {
		before = hits()
		_, err := n.command("arm " + fp + " " + mode)
		return err
	}
	f.effect = func(context.Context) string {
		return fmt.Sprintf("failpoint %s (%s) fired %d times", fp, mode, hits()-before)
	}
	f.heal = func(context.Context) error {
		_, err := n.command("disarm " + fp)
		return err
	}
	return f
}

// addFailpointFaults adds the faults injected through the failpoints of
// n3 and the open node.
func (s *soak) addFailpointFaults(fs map[string]*fault) {
	n3, open := s.cluster[2], s.open
	fs[FaultS3Unavailable] = failpoint(FaultS3Unavailable, "s3_unavailable", "fail", n3,
		"n3 refills a block from S3 again",
		func(ctx context.Context) []check {
			return []check{s.grows(ctx, n3, "gpucache_cold_refill_hits")}
		})
	fs[FaultS3Slow] = failpoint(FaultS3Slow, "s3_slow", "hang", n3,
		"n3 refills a block from S3 again",
		func(ctx context.Context) []check {
			return []check{s.grows(ctx, n3, "gpucache_cold_refill_hits")}
		})
	fs[FaultControlPlane] = failpoint(FaultControlPlane, "control_plane_loss", "fail", n3,
		"n3's control plane is live again, every view holds n1, n2 and n3, and n3 stores and serves hits again",
		func(ctx context.Context) []check {
			return append([]check{s.fullView(), s.live(n3)}, s.servesAgain(ctx, n3)...)
		})
	fs[FaultStorageLoss] = failpoint(FaultStorageLoss, "storage_loss", "fail", open,
		"the open node refills a block from its fs cold tier again",
		func(ctx context.Context) []check {
			return []check{s.grows(ctx, open, "gpucache_cold_refill_hits")}
		})
	fs[FaultNVMeTimeout] = failpoint(FaultNVMeTimeout, "nvme_timeout", "hang", open,
		"the open node refills a block from its fs cold tier again",
		func(ctx context.Context) []check {
			return []check{s.grows(ctx, open, "gpucache_cold_refill_hits")}
		})
}

// runFault runs one fault: inject, hold, heal, await recovery. It returns
// the record; the phase around it is measured by the caller.
func (s *soak) runFault(ctx context.Context, f *fault, cycle int) FaultRecord {
	r := FaultRecord{Fault: f.name, Target: f.target, Cycle: cycle, Means: f.means}
	if f.notRun != "" {
		r.NotRun = f.notRun
		return r
	}
	r.InjectedAt = time.Now().UTC()
	s.progress("fault %s (cycle %d): inject on %s", f.name, cycle, f.target)
	if err := f.inject(ctx); err != nil {
		r.Error = "inject: " + err.Error()
		// Heal anyway: a half-injected fault must not outlive its phase.
		f.heal(ctx)
		return r
	}
	if !sleepCtx(ctx, s.cfg.Schedule.Hold) {
		f.heal(context.Background())
		r.Error = "interrupted"
		return r
	}
	r.Effect = f.effect(ctx)
	r.HealedAt = time.Now().UTC()
	if err := f.heal(ctx); err != nil {
		r.Error = "heal: " + err.Error()
		return r
	}
	// Each condition is latched the first time it holds; the fault has
	// recovered when every one has held since the heal.
	checks := f.recovery(ctx)
	passed := make([]time.Duration, len(checks))
	deadline := time.Now().Add(s.cfg.Schedule.Recover)
	for {
		var missing []string
		for i, c := range checks {
			if passed[i] > 0 {
				continue
			}
			if m := c.fn(ctx); m != "" {
				missing = append(missing, m)
				continue
			}
			passed[i] = max(time.Since(r.HealedAt), time.Nanosecond)
		}
		if len(missing) == 0 {
			r.Recovered, r.RecoveredAt = true, time.Now().UTC()
			r.RecoverySec = r.RecoveredAt.Sub(r.HealedAt).Seconds()
			break
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, recoveryPoll) {
			r.Waiting = strings.Join(missing, "; ")
			break
		}
	}
	var steps []string
	for i, c := range checks {
		if passed[i] > 0 {
			steps = append(steps, fmt.Sprintf("%s +%.1fs", c.name, passed[i].Seconds()))
		}
	}
	r.Steps = strings.Join(steps, ", ")
	s.progress("fault %s (cycle %d): %s", f.name, cycle, r.status())
	return r
}

func (r FaultRecord) status() string {
	switch {
	case r.NotRun != "":
		return r.NotRun
	case r.Error != "":
		return "ERROR " + r.Error
	case r.Recovered:
		return fmt.Sprintf("recovered %.1fs after the heal [%s] (%s)", r.RecoverySec, r.Steps, r.Effect)
	}
	return "NOT RECOVERED: " + r.Waiting + " [held: " + r.Steps + "] (" + r.Effect + ")"
}

// sleepCtx waits d; false if ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
