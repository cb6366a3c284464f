package flash

import (
	"errors"
	"fmt"
	"io"
)

// scanResult is what scanning a segment found.
type scanResult struct {
	seq  uint64 // the sequence number in the segment header
	end  int64  // the end of the last record that verified
	torn error  // why the scan stopped before the end of the file (nil: it did not)
}

// scanSegment verifies a segment's header, then reads its record headers,
// never their payloads (a payload is verified when it is read), calling
// visit for each record that verifies, in file order. It stops at the
// first record whose header does not verify or whose extent passes the
// end of the file (size): a torn tail, reported in torn; nothing after it
// is visited. err is the segment header's failure (ErrVersion, or an
// ErrCorrupt error, also when want is not 0 and the header names another
// sequence number), and then no record is visited.
func scanSegment(r io.ReaderAt, size int64, want uint64, visit func(h *recHeader, off int64)) (scanResult, error) {
	var buf [recHeaderUsed]byte
	var res scanResult
	if size < segHeaderSize {
		return res, fmt.Errorf("%w: %d bytes, shorter than the segment header", ErrCorrupt, size)
	}
	if _, err := r.ReadAt(buf[:segHeaderUsed], 0); err != nil {
		return res, fmt.Errorf("reading the segment header: %w", err)
	}
	seq, err := decodeSegHeader(buf[:segHeaderUsed])
	if err != nil {
		return res, err
	}
	if want != 0 && seq != want {
		return res, fmt.Errorf("%w: the header names segment %d", ErrCorrupt, seq)
	}
	res.seq = seq
	off := int64(segHeaderSize)
	for off < size {
		if size-off < recHeaderSize {
			res.torn = fmt.Errorf("%w: %d bytes after the last record, less than a header", ErrCorrupt, size-off)
			break
		}
		if _, err := r.ReadAt(buf[:], off); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			res.torn = fmt.Errorf("reading the record header at %d: %w", off, err)
			break
		}
		h, err := decodeRecHeader(buf[:])
		if err != nil {
			res.torn = err
			break
		}
		if ext := h.extent(); ext > size-off {
			res.torn = fmt.Errorf("%w: record of %d bytes passes the end of the file", ErrCorrupt, ext)
			break
		}
		visit(&h, off)
		off += h.extent()
	}
	res.end = off
	return res, nil
}
