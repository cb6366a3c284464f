package directory

import "strconv"

// String returns the outcome in lower case, as logs and test scripts print it.
func (o Outcome) String() string {
	switch o {
	case Hit:
		return "hit"
	case Lead:
		return "lead"
	case Joined:
		return "joined"
	case Denied:
		return "denied"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// String returns the notice kind in lower case.
func (k NoticeKind) String() string {
	switch k {
	case Finished:
		return "finished"
	case Failed:
		return "failed"
	case Fenced:
		return "fenced"
	case Promoted:
		return "promoted"
	}
	return "NoticeKind(" + strconv.Itoa(int(k)) + ")"
}
