package cold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// FS is a Store on a local directory: the embedded default cold tier.
//
// Layout under the root directory:
//
//	objects/<key>   one regular file per object; "/" in a key is a subdirectory
//	tmp/put-*       bodies being written; never visible as objects
//
// A Put writes the body to a temp file in tmp/, fsyncs it, then publishes it
// with one atomic directory operation and fsyncs the target directory:
// rename(2) for a plain Put, link(2) for IfNoneMatch (link fails if the name
// exists, so the existence check and the publish are one step). tmp/ sits
// beside objects/ under the same root, so both are on one file system and
// the rename stays atomic. A crash leaves at worst a temp file, never a
// partial object; CleanTemp removes those.
//
// Because keys map onto a directory tree, a key cannot be both an object and
// a directory prefix of another key ("a" and "a/b"); the second Put fails
// with ErrInvalidKey, as it does on the versitygw posix gateway. Keys built
// from digests never collide this way. Delete removes directories it leaves
// empty, so "a" can be written again once every "a/..." key is gone.
//
// I/O failures (ENOSPC, EIO, EROFS, EACCES) wrap ErrUnavailable together with
// the *fs.PathError, so errors.Is works for both the kind and the errno.
type FS struct {
	root    string // absolute path of the root directory
	objects string // root/objects
	tmp     string // root/tmp
}

var (
	_ Store = (*FS)(nil)
	_ Teer  = (*FS)(nil)
)

// maxSegment is the longest file name the common Linux file systems accept.
const maxSegment = 255

// tempPrefix starts the name of every temp file a Put writes (writeTemp);
// CleanTemp removes only names that start with it.
const tempPrefix = "put-"

// publishTries bounds retries when a concurrent Delete removes the directory
// a Put is publishing into (see Delete).
const publishTries = 8

// NewFS opens (creating if needed) a store rooted at dir. It does not remove
// leftover temp files, since another process may be writing to the same
// directory; the process that owns it calls CleanTemp before serving (the
// daemon does, at start).
func NewFS(dir string) (*FS, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("gpucache/cold: fs root %q: %w", dir, err)
	}
	f := &FS{root: root, objects: filepath.Join(root, "objects"), tmp: filepath.Join(root, "tmp")}
	for _, d := range []string{f.objects, f.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("gpucache/cold: fs root %q: %w", dir, err)
		}
	}
	return f, nil
}

// Root returns the store's root directory.
func (f *FS) Root() string { return f.root }

// checkFSKey applies ValidKey plus the file name length limit.
func checkFSKey(key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	for seg := range strings.SplitSeq(key, "/") {
		if len(seg) > maxSegment {
			return fmt.Errorf("%w: segment of %d bytes, fs limit %d", ErrInvalidKey, len(seg), maxSegment)
		}
	}
	return nil
}

// path maps a checked key to its file. ValidKey has excluded "..", "." and
// leading "/", so the result stays under f.objects.
func (f *FS) path(key string) string {
	return filepath.Join(f.objects, filepath.FromSlash(key))
}

// fsErr wraps an unexpected I/O error: ErrUnavailable plus the cause, with a
// plain word for the full-disk case.
func fsErr(op, key string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("fs %s %q: disk full: %w: %w", op, key, ErrUnavailable, err)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return fmt.Errorf("fs %s %q: %w: %w", op, key, ErrInvalidKey, err)
	}
	return fmt.Errorf("fs %s %q: %w: %w", op, key, ErrUnavailable, err)
}

func conflictErr(op, key string, err error) error {
	return fmt.Errorf("fs %s %q: %w: the key and another key's directory prefix collide (%w)", op, key, ErrInvalidKey, err)
}

// Put implements Store.
func (f *FS) Put(ctx context.Context, key string, body []byte, opts PutOptions) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs Put %q: %w", key, err)
	}
	if err := checkFSKey(key); err != nil {
		return fmt.Errorf("fs Put: %w", err)
	}
	tmp, err := f.writeTemp(body)
	if err != nil {
		return fsErr(OpPut, key, err)
	}
	// After a successful rename tmp no longer exists; after a link it is a
	// second name for the object. Either way removing it is right.
	defer os.Remove(tmp)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs Put %q: %w", key, err)
	}
	final := f.path(key)
	parent := filepath.Dir(final)
	for try := 1; ; try++ {
		err := f.mkdirs(parent)
		if err == nil {
			err = f.publish(tmp, final, opts.IfNoneMatch)
			if err == nil {
				break
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return f.publishErr(key, final, err)
			}
		}
		switch {
		case errors.Is(err, fs.ErrNotExist) && try < publishTries:
			// A concurrent Delete removed a directory on the path: redo it.
		case errors.Is(err, syscall.ENOTDIR):
			return conflictErr(OpPut, key, err)
		default:
			return fsErr(OpPut, key, err)
		}
	}
	if err := syncDir(parent); err != nil {
		return fsErr(OpPut, key, err)
	}
	return nil
}

// writeTemp writes body to a new fsynced temp file and returns its path.
func (f *FS) writeTemp(body []byte) (string, error) {
	t, err := os.CreateTemp(f.tmp, tempPrefix+"*")
	if err != nil {
		return "", err
	}
	_, err = t.Write(body)
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(t.Name())
		return "", err
	}
	return t.Name(), nil
}

// publish makes tmp visible as final in one atomic step.
func (f *FS) publish(tmp, final string, ifNoneMatch bool) error {
	if ifNoneMatch {
		return os.Link(tmp, final)
	}
	return os.Rename(tmp, final)
}

// publishErr classifies a failed link/rename.
func (f *FS) publishErr(key, final string, err error) error {
	isDir := false
	if fi, serr := os.Lstat(final); serr == nil && fi.IsDir() {
		isDir = true
	}
	switch {
	case isDir, errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ENOTEMPTY):
		return conflictErr(OpPut, key, err)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("fs Put %q: %w", key, ErrExists)
	}
	return fsErr(OpPut, key, err)
}

// mkdirs creates dir and its missing parents below f.objects, fsyncing each
// parent whose entries changed so the new directory survives a crash.
func (f *FS) mkdirs(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	rel, err := filepath.Rel(f.objects, dir)
	if err != nil {
		return err
	}
	cur := f.objects
	if rel == "." {
		return nil
	}
	for seg := range strings.SplitSeq(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, seg)
		err := os.Mkdir(next, 0o755)
		switch {
		case err == nil:
			if err := syncDir(cur); err != nil {
				return err
			}
		case errors.Is(err, fs.ErrExist):
			if fi, serr := os.Lstat(next); serr != nil {
				return serr
			} else if !fi.IsDir() {
				return fmt.Errorf("mkdir %s: %w", next, syscall.ENOTDIR)
			}
		default:
			return err
		}
		cur = next
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// stat returns the object file's info, or ErrNotFound for a missing key or
// a name that is not a regular file (a directory prefix of other keys).
func (f *FS) stat(op, key string) (os.FileInfo, error) {
	fi, err := os.Lstat(f.path(key))
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil, fmt.Errorf("fs %s %q: %w", op, key, ErrNotFound)
	case err != nil:
		return nil, fsErr(op, key, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("fs %s %q: %w", op, key, ErrNotFound)
	}
	return fi, nil
}

// Head implements Store.
func (f *FS) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, fmt.Errorf("fs Head %q: %w", key, err)
	}
	if err := checkFSKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("fs Head: %w", err)
	}
	fi, err := f.stat(OpHead, key)
	if err != nil {
		return ObjectInfo{}, err
	}
	return ObjectInfo{Key: key, Size: fi.Size(), Modified: fi.ModTime()}, nil
}

// RangeGet implements Store. It reads from one open file, so a concurrent
// overwrite (a rename onto the name) cannot mix two versions.
func (f *FS) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	return f.rangeGet(ctx, key, off, dst, nil)
}

// RangeGetTee implements Teer: it reads the range TeeChunk bytes at a time
// and writes each piece to w while it is still in the CPU's cache.
func (f *FS) RangeGetTee(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error {
	return f.rangeGet(ctx, key, off, dst, w)
}

// rangeGet is RangeGet, and RangeGetTee when w is not nil.
func (f *FS) rangeGet(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs RangeGet %q: %w", key, err)
	}
	if err := checkFSKey(key); err != nil {
		return fmt.Errorf("fs RangeGet: %w", err)
	}
	file, err := os.Open(f.path(key))
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("fs RangeGet %q: %w", key, ErrNotFound)
	case err != nil:
		return fsErr(OpRangeGet, key, err)
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return fsErr(OpRangeGet, key, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("fs RangeGet %q: %w", key, ErrNotFound)
	}
	size := fi.Size()
	if off < 0 || off > size || int64(len(dst)) > size-off {
		return fmt.Errorf("fs RangeGet %q [%d, +%d) of %d bytes: %w", key, off, len(dst), size, ErrRange)
	}
	if len(dst) == 0 {
		return nil
	}
	// Objects are replaced by rename, never truncated in place, so a short
	// read here is an I/O fault, not a range error.
	if w == nil {
		if _, err := file.ReadAt(dst, off); err != nil {
			return fsErr(OpRangeGet, key, err)
		}
		return nil
	}
	for n := 0; n < len(dst); n += TeeChunk {
		piece := dst[n:min(n+TeeChunk, len(dst))]
		if _, err := file.ReadAt(piece, off+int64(n)); err != nil {
			return fsErr(OpRangeGet, key, err)
		}
		if err := teeWrite(w, key, piece); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Store. It then removes the directories the deletion left
// empty, up to objects/. A Put racing with that cleanup sees its directory
// vanish, recreates it and retries (see publishTries).
func (f *FS) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs Delete %q: %w", key, err)
	}
	if err := checkFSKey(key); err != nil {
		return fmt.Errorf("fs Delete: %w", err)
	}
	if _, err := f.stat(OpDelete, key); errors.Is(err, ErrNotFound) {
		return nil // missing, or only a directory prefix of other keys
	} else if err != nil {
		return err
	}
	p := f.path(key)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fsErr(OpDelete, key, err)
	}
	if err := syncDir(filepath.Dir(p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fsErr(OpDelete, key, err)
	}
	for dir := filepath.Dir(p); dir != f.objects; dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break // not empty (or already gone): stop climbing
		}
	}
	return nil
}

// List implements Store. It reads one directory at a time, so memory grows
// with the widest directory, not the whole store. Entries are visited in
// key order: a directory "d" sorts as "d/", so "a-c" comes before "a/b".
func (f *FS) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs List %q: %w", prefix, err)
	}
	if err := ValidPrefix(prefix); err != nil {
		return fmt.Errorf("fs List: %w", err)
	}
	// Every key with this prefix lives under the directory named by the
	// prefix up to its last "/".
	dirKey := prefix[:strings.LastIndex(prefix, "/")+1]
	return f.walk(ctx, filepath.Join(f.objects, filepath.FromSlash(dirKey)), dirKey, prefix, fn)
}

func (f *FS) walk(ctx context.Context, dir, dirKey, prefix string, fn func(ObjectInfo) error) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil // no such prefix, or removed by a concurrent Delete
	case err != nil:
		return fsErr(OpList, prefix, err)
	}
	items := walkItems(entries, dirKey, prefix)
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fs List %q: %w", prefix, err)
		}
		if it.entry.IsDir() {
			if err := f.walk(ctx, filepath.Join(dir, it.entry.Name()), it.key, prefix, fn); err != nil {
				return err
			}
			continue
		}
		fi, err := it.entry.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since ReadDir
		} else if err != nil {
			return fsErr(OpList, prefix, err)
		}
		if err := fn(ObjectInfo{Key: it.key, Size: fi.Size(), Modified: fi.ModTime()}); err != nil {
			return err
		}
	}
	return nil
}

// walkItem is one entry of a directory walk, by key: an object key, or a
// directory key ending in "/".
type walkItem struct {
	key   string
	entry os.DirEntry
}

// walkItems returns the entries of the directory of key dirKey that are
// under prefix (directories: that may hold keys under it), in key order.
func walkItems(entries []os.DirEntry, dirKey, prefix string) []walkItem {
	items := make([]walkItem, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			k := dirKey + e.Name() + "/"
			if strings.HasPrefix(k, prefix) || strings.HasPrefix(prefix, k) {
				items = append(items, walkItem{k, e})
			}
		} else if k := dirKey + e.Name(); e.Type().IsRegular() && strings.HasPrefix(k, prefix) {
			items = append(items, walkItem{k, e})
		}
	}
	slices.SortFunc(items, func(a, b walkItem) int { return strings.Compare(a.key, b.key) })
	return items
}

// CleanTemp removes temp files left by interrupted Puts whose last change is
// older than olderThan, and returns how many it removed. Only regular files
// in tmp/ named like a Put's temp file (put-*) are touched: anything else
// there is not ours. A Put's temp file lives only while that Put runs, so
// olderThan = 0 (remove all) is safe only before the store serves traffic;
// while serving, pass a margin well above the longest Put (minutes).
func (f *FS) CleanTemp(ctx context.Context, olderThan time.Duration) (int, error) {
	entries, err := os.ReadDir(f.tmp)
	if err != nil {
		return 0, fsErr("CleanTemp", f.tmp, err)
	}
	cutoff := time.Now().Add(-olderThan)
	removed := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return removed, fmt.Errorf("fs CleanTemp: %w", err)
		}
		if !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || (olderThan > 0 && !fi.ModTime().Before(cutoff)) {
			continue
		}
		if err := os.Remove(filepath.Join(f.tmp, e.Name())); err == nil {
			removed++
		}
	}
	return removed, nil
}
