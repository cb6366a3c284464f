package wire

import "encoding/binary"

// Single-flight fills. When many engines miss on the same prefix at once,
// ACQUIRE makes exactly one of them the leader of each missing block; the
// leader computes the block and publishes it with FILL_COMMIT (or gives its
// turn away with FILL_ABORT); the others WAIT for a payload-free notice and
// then GET the block.

// FillToken names one leader turn of one fill: the fill, the epoch it was
// started under, and the turn (a failover hands the fill to a new leader
// with the next turn). Encoded as u64 fill | u64 epoch | u32 turn.
type FillToken struct {
	Fill  uint64
	Epoch uint64
	Turn  uint32
}

// fillTokenSize is the encoded size of a FillToken.
const fillTokenSize = 20

func appendToken(b []byte, t FillToken) []byte {
	b = binary.LittleEndian.AppendUint64(b, t.Fill)
	b = binary.LittleEndian.AppendUint64(b, t.Epoch)
	return binary.LittleEndian.AppendUint32(b, t.Turn)
}

func (r *reader) token() FillToken { return FillToken{Fill: r.u64(), Epoch: r.u64(), Turn: r.u32()} }

// AcquireOutcome is the per-key answer to ACQUIRE.
type AcquireOutcome uint8

// ACQUIRE outcomes.
const (
	AcquireHit    AcquireOutcome = 0 // cached: GET it
	AcquireLead   AcquireOutcome = 1 // you fill it: Token is yours
	AcquireJoined AcquireOutcome = 2 // another session of your tenant fills it: WAIT on Token.Fill
	AcquireDenied AcquireOutcome = 3 // no coordination available (quota): compute it yourself
	acquireMax                   = AcquireDenied
)

func (o AcquireOutcome) String() string {
	switch o {
	case AcquireHit:
		return "HIT"
	case AcquireLead:
		return "LEAD"
	case AcquireJoined:
		return "JOINED"
	case AcquireDenied:
		return "DENIED"
	}
	return "ACQUIRE(?)"
}

// AcquireRequest asks, for each key of a chain, for a hit, the lead, or a
// place among the waiters.
type AcquireRequest struct {
	Namespace []byte
	Keys      []Key
}

// AcquireEntry is one key's answer. Token is zero for HIT and DENIED; for
// JOINED only Token.Fill is meaningful.
type AcquireEntry struct {
	Outcome AcquireOutcome
	Token   FillToken
}

// AcquireResponse answers ACQUIRE, one entry per key.
type AcquireResponse struct {
	Entries []AcquireEntry
}

// FillBlock is one block of a FILL_COMMIT: a leader token and the fields of
// a PutBlock.
type FillBlock struct {
	Token       FillToken
	Key         Key
	Parent      Key
	ValidLength uint32   // as PutBlock.ValidLength: 1..len(TokenIDs)
	Len         uint32   // payload bytes
	Position    uint64   // token offset of the block's first token
	TokenIDs    []uint32 // the block's token ids, 1..MaxBlockTokens of them
}

// FillBlockSize is the encoded size of one FillBlock with n token ids.
func FillBlockSize(n int) int { return fillTokenSize + 2*KeySize + tailSize(n) }

// FillCommitRequest is the table of a FILL_COMMIT; payloads follow it in
// order, exactly as in PUT. The answer is a StatusResponse: STORED, FENCED,
// NOT_LEADER, or a PUT status.
type FillCommitRequest struct {
	Namespace []byte
	Blocks    []FillBlock
}

// FillAbortRequest gives up leader turns; each fill passes to its next
// waiter. The answer is a StatusResponse: ABORTED, FENCED or NOT_LEADER.
type FillAbortRequest struct {
	Namespace []byte
	Tokens    []FillToken
}

// NoticeKind is what a WAIT reports for a fill. Notices carry no payload.
type NoticeKind uint8

// Notices.
const (
	NoticePending  NoticeKind = 0 // nothing yet; the WAIT's timeout passed
	NoticeFinished NoticeKind = 1 // published: GET it
	NoticeFailed   NoticeKind = 2 // the fill failed and the turn did not come to you: compute it yourself
	NoticeFenced   NoticeKind = 3 // the epoch changed: ACQUIRE again
	NoticePromoted NoticeKind = 4 // the leader failed and you lead now: Token is yours
	noticeMax                 = NoticePromoted
)

func (k NoticeKind) String() string {
	switch k {
	case NoticePending:
		return "PENDING"
	case NoticeFinished:
		return "FINISHED"
	case NoticeFailed:
		return "FAILED"
	case NoticeFenced:
		return "FENCED"
	case NoticePromoted:
		return "PROMOTED"
	}
	return "NOTICE(?)"
}

// WaitRequest long-polls for notices on fills this session joined. The
// server answers when every listed fill has a notice, or when TimeoutMillis
// passes (the server caps it), whichever is first.
type WaitRequest struct {
	Namespace     []byte
	TimeoutMillis uint32
	Fills         []uint64
}

// WaitEntry is one fill's notice. Token is set for PROMOTED.
type WaitEntry struct {
	Kind  NoticeKind
	Token FillToken
}

// WaitResponse answers WAIT, one entry per fill, in request order.
type WaitResponse struct {
	Entries []WaitEntry
}

// AppendTo encodes m.
func (m *AcquireRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	return appendKeys(b, m.Keys)
}

// Decode parses m from b, allowing at most maxBatch keys. m.Namespace
// aliases b.
func (m *AcquireRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	m.Keys = r.keys(m.Keys, maxBatch)
	return r.done()
}

// AppendTo encodes m.
func (m *AcquireResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Entries)))
	for _, e := range m.Entries {
		b = appendToken(append(b, byte(e.Outcome)), e.Token)
	}
	return b
}

// Decode parses m from b.
func (m *AcquireResponse) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	n := r.count(maxBatch, 1+fillTokenSize)
	m.Entries = make([]AcquireEntry, n)
	for i := range m.Entries {
		e := &m.Entries[i]
		e.Outcome = AcquireOutcome(r.u8())
		e.Token = r.token()
		if e.Outcome > acquireMax {
			r.fail("entry %d: unknown outcome %d", i, e.Outcome)
		}
	}
	return r.done()
}

// AppendTo encodes the table of a FILL_COMMIT.
func (m *FillCommitRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Blocks)))
	for i := range m.Blocks {
		fb := &m.Blocks[i]
		b = appendToken(b, fb.Token)
		b = append(b, fb.Key[:]...)
		b = append(b, fb.Parent[:]...)
		b = appendTail(b, fb.ValidLength, fb.Len, fb.Position, fb.TokenIDs)
	}
	return b
}

// Decode parses the table of a FILL_COMMIT and returns the payload total,
// which must equal the bytes that follow the table. Aliasing and reuse are
// as in PutRequest.Decode: m.Namespace aliases b; Blocks and TokenIDs reuse
// m's backing arrays.
func (m *FillCommitRequest) Decode(b []byte, maxBatch uint32) (payload uint64, err error) {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	n := r.count(maxBatch, fillTokenSize+2*KeySize+minTail)
	if cap(m.Blocks) < n {
		nb := make([]FillBlock, n)
		copy(nb, m.Blocks[:cap(m.Blocks)]) // keep their TokenIDs arrays for reuse
		m.Blocks = nb
	}
	m.Blocks = m.Blocks[:n]
	total := 0
	for i := range m.Blocks {
		fb := &m.Blocks[i]
		fb.Token = r.token()
		copy(fb.Key[:], r.take(KeySize))
		copy(fb.Parent[:], r.take(KeySize))
		fb.ValidLength, fb.Len, fb.Position, fb.TokenIDs = r.tail(fb.TokenIDs, &total)
		payload += uint64(fb.Len)
	}
	return payload, r.done()
}

// AppendTo encodes m.
func (m *FillAbortRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Tokens)))
	for _, t := range m.Tokens {
		b = appendToken(b, t)
	}
	return b
}

// Decode parses m from b. m.Namespace aliases b.
func (m *FillAbortRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	n := r.count(maxBatch, fillTokenSize)
	m.Tokens = make([]FillToken, n)
	for i := range m.Tokens {
		m.Tokens[i] = r.token()
	}
	return r.done()
}

// AppendTo encodes m.
func (m *WaitRequest) AppendTo(b []byte) []byte {
	b = appendBytes32(b, m.Namespace)
	b = binary.LittleEndian.AppendUint32(b, m.TimeoutMillis)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Fills)))
	for _, f := range m.Fills {
		b = binary.LittleEndian.AppendUint64(b, f)
	}
	return b
}

// Decode parses m from b. m.Namespace aliases b.
func (m *WaitRequest) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	m.Namespace = r.blob(MaxNamespaceLen)
	m.TimeoutMillis = r.u32()
	n := r.count(maxBatch, 8)
	m.Fills = make([]uint64, n)
	for i := range m.Fills {
		m.Fills[i] = r.u64()
	}
	return r.done()
}

// AppendTo encodes m.
func (m *WaitResponse) AppendTo(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Entries)))
	for _, e := range m.Entries {
		b = appendToken(append(b, byte(e.Kind)), e.Token)
	}
	return b
}

// Decode parses m from b.
func (m *WaitResponse) Decode(b []byte, maxBatch uint32) error {
	r := reader{b: b}
	n := r.count(maxBatch, 1+fillTokenSize)
	m.Entries = make([]WaitEntry, n)
	for i := range m.Entries {
		e := &m.Entries[i]
		e.Kind = NoticeKind(r.u8())
		e.Token = r.token()
		if e.Kind > noticeMax {
			r.fail("entry %d: unknown notice %d", i, e.Kind)
		}
	}
	return r.done()
}
