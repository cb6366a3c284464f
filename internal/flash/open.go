package flash

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpucache/gpucache/api/identity"
)

// probePrefix names the file Open writes to learn whether Dir is
// writable and takes O_DIRECT; it is removed at once.
const probePrefix = ".flash-probe-"

// Open opens the tier in cfg.Dir: it checks the directory, picks direct
// or buffered I/O, rebuilds the index from the segment files (record
// headers only), and starts the writer and the reclaimer. Close stops
// them.
func Open(cfg Config) (*Tier, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(cfg.Dir); err != nil {
		return nil, err
	}
	direct, err := probeDir(cfg.fs, cfg.Dir, cfg.Direct)
	if err != nil {
		return nil, err
	}
	t := &Tier{
		cfg:        cfg,
		log:        cfg.Logger,
		hooks:      cfg.Hooks,
		direct:     direct,
		maxPayload: cfg.SegmentBytes - segHeaderSize - recHeaderSize,
		batchBytes: min(maxBatchBytes, cfg.SegmentBytes),
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		reclaimReq: make(chan chan error),
		degradedCh: make(chan struct{}, 1),
	}
	t.mu.index = map[blockID]*entry{}
	t.mu.tenants = map[identity.NamespaceDigest]string{}
	t.mu.tenantUse = map[string]*tenantUse{}
	t.mu.quotas = cfg.TenantQuotas
	if t.mu.quotas == nil {
		t.mu.quotas = map[string]int64{}
	}
	t.mu.segs = map[uint64]*segment{}
	t.mu.progress = make(chan struct{})
	t.mu.nextSeq = 1
	if err := t.rebuild(); err != nil {
		for _, s := range t.mu.segs {
			s.closeFiles()
		}
		return nil, err
	}
	t.log.Info("flash: open", "dir", cfg.Dir, "direct", direct, "segments", len(t.mu.segs), "blocks", len(t.mu.index),
		"bytes", t.mu.bytes, "capacity", cfg.Capacity, "reclaim", cfg.Reclaim)
	t.wg.Add(2)
	go t.writeLoop()
	go t.background()
	t.kick() // quota drops at open queued tombstones
	return t, nil
}

// prepareDir creates dir if it is missing and checks it is a directory.
func prepareDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrDir, dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDir, dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrDir, dir)
	}
	return nil
}

// probeDir writes one aligned block to a probe file in dir, with O_DIRECT
// unless mode is off, and reports whether direct I/O works there. It
// falls back to buffered I/O in auto mode; a directory it cannot write is
// an error naming it.
func probeDir(fsys fsys, dir, mode string) (bool, error) {
	p := filepath.Join(dir, fmt.Sprintf("%s%d", probePrefix, os.Getpid()))
	defer os.Remove(p)
	try := func(flag int) error {
		f, err := fsys.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC|flag, 0o600)
		if err != nil {
			return err
		}
		_, err = f.WriteVAt([][]byte{alignedBuf(align)}, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	if mode != DirectOff {
		err := errors.New("no direct I/O on this platform")
		if oDirect != 0 {
			err = try(oDirect)
		}
		if err == nil {
			return true, nil
		}
		if mode == DirectOn {
			return false, fmt.Errorf("%w: %s: direct I/O (Direct %q) refused: %v", ErrDir, dir, mode, err)
		}
	}
	if err := try(0); err != nil {
		return false, fmt.Errorf("%w: %s is not writable: %v", ErrDir, dir, err)
	}
	return false, nil
}

// rebuild scans the segment files in sequence order and rebuilds the
// index: later records and tombstones override earlier ones.
func (t *Tier) rebuild() error {
	ents, err := os.ReadDir(t.cfg.Dir)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDir, t.cfg.Dir, err)
	}
	var seqs []uint64
	var unknown []string
	for _, de := range ents {
		if seq, ok := parseSegName(de.Name()); ok && de.Type().IsRegular() {
			seqs = append(seqs, seq)
		} else if !strings.HasPrefix(de.Name(), probePrefix) {
			unknown = append(unknown, de.Name())
		}
	}
	if len(unknown) > 0 {
		t.log.Info("flash: leaving files that are not segments alone", "dir", t.cfg.Dir, "files", unknown)
	}
	slices.Sort(seqs)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, seq := range seqs {
		t.loadSegmentLocked(seq)
		t.mu.nextSeq = seq + 1
	}
	for tenant := range t.mu.quotas {
		t.fitQuotaLocked(tenant, 0)
	}
	return nil
}

// loadSegmentLocked opens and scans one segment file.
func (t *Tier) loadSegmentLocked(seq uint64) {
	s, err := openSegmentFiles(t.cfg.fs, t.cfg.Dir, seq, t.direct, false)
	if err != nil {
		t.st.segmentsSkipped.Add(1)
		t.log.Error("flash: cannot open a segment; left alone", "seq", seq, "err", err)
		return
	}
	size, err := s.bio.Size()
	if err != nil {
		s.closeFiles()
		t.st.segmentsSkipped.Add(1)
		t.log.Error("flash: cannot stat a segment; left alone", "path", s.path, "err", err)
		return
	}
	res, err := scanSegment(s.bio, size, seq, func(h *recHeader, off int64) { t.applyLocked(s, h, off) })
	switch {
	case errors.Is(err, ErrVersion):
		s.closeFiles()
		t.st.segmentsSkipped.Add(1)
		t.log.Error("flash: segment of an unknown format version; left alone and not counted", "path", s.path,
			"err", fmt.Errorf("%w: %s", ErrVersion, s.path))
		return
	case err != nil:
		// Ours by its name, but its header does not verify (a crash as it
		// was created, or damage): no records; it is reclaimed in its turn.
		t.st.corrupt.Add(1)
		t.log.Warn("flash: segment header does not verify; its records are ignored", "path", s.path, "err", err)
	case res.torn != nil:
		t.st.tornTails.Add(1)
		t.log.Warn("flash: segment ends in a torn record; what follows is ignored", "path", s.path, "at", res.end, "err", res.torn)
	}
	s.size, s.sealed = size, true
	t.mu.segs[seq] = s
	t.mu.bytes += size
}

// applyLocked applies one record found by a scan: a block replaces any
// earlier record of the same block, a tombstone removes it.
func (t *Tier) applyLocked(s *segment, h *recHeader, off int64) {
	id := blockID{h.digest, h.key}
	if old := t.mu.index[id]; old != nil {
		t.dropLocked(old, dropShadowed)
	}
	switch h.kind {
	case kindBlock:
		e := &entry{id: id, parent: h.parent, tokens: h.tokens, tenant: h.tenant, n: h.length, sum: h.sum,
			state: stOnDisk, seg: s, off: off, wseq: s.seq}
		t.insertLocked(e)
		s.link(e)
		t.learnLocked(h.digest, h.tenant)
	case kindTombstone:
		if h.target != 0 && h.target != s.seq && t.mu.segs[h.target] != nil {
			s.tombs = append(s.tombs, tombRef{id: id, tenant: h.tenant, target: h.target})
		}
	}
}
