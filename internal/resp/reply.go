package resp

import "strconv"

// Replies used verbatim.
var (
	OK   = []byte("+OK\r\n")
	Pong = []byte("+PONG\r\n")
	Nil  = []byte("$-1\r\n")
	Zero = []byte(":0\r\n")
	One  = []byte(":1\r\n")
)

// AppendError appends an error reply "-msg\r\n". msg starts with the
// error kind ("ERR", "NOAUTH", "WRONGPASS"); CR and LF become spaces.
func AppendError(b []byte, msg string) []byte {
	return appendLine(append(b, '-'), msg)
}

func appendLine(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\r', '\n')
}

// AppendInt appends an integer reply ":n\r\n".
func AppendInt(b []byte, n int64) []byte {
	return append(strconv.AppendInt(append(b, ':'), n, 10), '\r', '\n')
}

// AppendBulkHeader appends the header of a bulk reply of n bytes; the
// payload and a CRLF follow.
func AppendBulkHeader(b []byte, n int) []byte {
	return append(strconv.AppendInt(append(b, '$'), int64(n), 10), '\r', '\n')
}

// AppendBulk appends a whole bulk reply.
func AppendBulk(b, data []byte) []byte {
	return append(append(AppendBulkHeader(b, len(data)), data...), '\r', '\n')
}

// AppendArrayHeader appends the header of an array of n elements.
func AppendArrayHeader(b []byte, n int) []byte {
	return append(strconv.AppendInt(append(b, '*'), int64(n), 10), '\r', '\n')
}
