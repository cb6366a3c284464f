//go:build !linux

package flash

// oDirect is 0 where the tier has no direct I/O: Direct "auto" uses
// buffered I/O and "on" refuses to open.
const oDirect = 0

// writev writes bufs one by one.
func (o osFile) writev(bufs [][]byte, off int64) (int, error) {
	n := 0
	for _, b := range bufs {
		m, err := o.f.WriteAt(b, off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Datasync is fsync.
func (o osFile) Datasync() error { return o.f.Sync() }
