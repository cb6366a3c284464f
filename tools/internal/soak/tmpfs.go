package soak

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// coldDisk is the open node's cold-tier disk: a tmpfs of a fixed size,
// mounted by the soak, with the node's cold_dir inside. The full-disk
// fault writes a ballast file until the file system answers ENOSPC; heal
// removes it. The cold tier reclaims nothing for a day, so on a long run
// the node's own packs would fill the disk for good: outside the fault,
// the soak grows the tmpfs (a remount that doubles it, at most maxTmpfs)
// whenever the node's data passes three quarters of it, so the disk is
// full only when the schedule says so.
type coldDisk struct {
	mount   string // the tmpfs mount point
	coldDir string // the node's cold_dir, under mount
	ballast string

	mu      sync.Mutex
	size    int64 // guarded by mu: current tmpfs size
	mounted bool  // guarded by mu
	full    bool  // guarded by mu: the fault holds the disk full
	grown   int   // guarded by mu: remounts that grew it
}

// maxTmpfs caps the tmpfs's growth.
const maxTmpfs = 4 << 30

// tmpfsUnavailable says why no tmpfs can be mounted here, or "".
func tmpfsUnavailable() string {
	if os.Geteuid() != 0 {
		return "not root: mounting a tmpfs needs CAP_SYS_ADMIN"
	}
	if _, err := exec.LookPath("mount"); err != nil {
		return "mount(8) not found"
	}
	return ""
}

func newColdDisk(dir string, size int64, mount bool) (*coldDisk, error) {
	d := &coldDisk{mount: dir, coldDir: filepath.Join(dir, "cold"), ballast: filepath.Join(dir, "ballast"), size: size}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if mount {
		out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10)+",mode=0700", "gpucache-soak", dir).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("gpucache/soak: mount tmpfs on %s: %v: %s", dir, err, out)
		}
		d.mounted = true
	}
	return d, os.MkdirAll(d.coldDir, 0o700)
}

// fill writes the ballast until the disk is full and returns its size.
func (d *coldDisk) fill() (int64, error) {
	d.mu.Lock()
	d.full = true
	d.mu.Unlock()
	f, err := os.OpenFile(d.ballast, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for chunk := len(buf); chunk > 0; {
		w, err := f.Write(buf[:chunk])
		n += int64(w)
		switch {
		case errors.Is(err, syscall.ENOSPC):
			chunk /= 2 // fill the last pages too
		case err != nil:
			return n, err
		}
		if n > maxTmpfs {
			return n, errors.New("gpucache/soak: the cold disk does not fill up: is it a tmpfs?")
		}
	}
	return n, nil
}

// free removes the ballast and makes room as maintain does.
func (d *coldDisk) free() error {
	if err := os.Remove(d.ballast); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	d.mu.Lock()
	d.full = false
	d.mu.Unlock()
	return d.maintain()
}

// maintain grows the tmpfs when the node's data uses more than three
// quarters of it, unless the fault holds it full.
func (d *coldDisk) maintain() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.mounted || d.full {
		return nil
	}
	used, err := diskUsed(d.mount)
	if err != nil {
		return err
	}
	if used*4 < d.size*3 || d.size*2 > maxTmpfs {
		return nil
	}
	next := d.size * 2
	out, err := exec.Command("mount", "-o", "remount,size="+strconv.FormatInt(next, 10), d.mount).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gpucache/soak: grow the tmpfs: %v: %s", err, out)
	}
	d.size = next
	d.grown++
	return nil
}

func (d *coldDisk) state() (size int64, mounted bool, grown int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.size, d.mounted, d.grown
}

// unmount unmounts the tmpfs (lazily, should a file still be open).
func (d *coldDisk) unmount() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mounted {
		exec.Command("umount", "-l", d.mount).Run()
		d.mounted = false
	}
}

// newestUnder returns the latest modification time of root's immediate
// subdirectories (and of root): a new object under
// root/<namespace>/ changes its directory's time. It is how the soak sees
// a cold tier write a manifest without listing every object.
func newestUnder(root string) time.Time {
	var t time.Time
	if st, err := os.Stat(root); err == nil {
		t = st.ModTime()
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return t
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if st, err := os.Stat(filepath.Join(root, e.Name())); err == nil && st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	return t
}
