package crypt

// Shuffle2 appends src with its bytes split into two planes to dst: every
// even-indexed byte, then every odd-indexed byte (an odd last byte goes
// last). For 16-bit floats (fp16, bf16) the planes are the low and the
// high bytes of each value; the high byte (sign, exponent, top mantissa
// bits) varies much less than the low one, and zstd finds that only when
// the planes are apart (docs/BENCHMARKS.md, "Cold-tier compression").
func Shuffle2(dst, src []byte) []byte {
	n := len(src)
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	out := dst[start:]
	half := n / 2
	for i := range half {
		out[i] = src[2*i]
		out[half+i] = src[2*i+1]
	}
	if n%2 == 1 {
		out[n-1] = src[n-1]
	}
	return dst
}

// Unshuffle2 undoes Shuffle2: it writes into dst (len(dst) == len(src))
// the bytes Shuffle2 took from it.
func Unshuffle2(dst, src []byte) {
	n := len(src)
	half := n / 2
	for i := range half {
		dst[2*i] = src[i]
		dst[2*i+1] = src[half+i]
	}
	if n%2 == 1 {
		dst[n-1] = src[n-1]
	}
}
