package regress

import (
	"strings"
)

// AddStatusColumn rewrites the contract tables of a CONTRACTS.md so every
// table has a status column second, after the contract. It is mechanical,
// so it can be rerun after merges: a table that has the column keeps its
// statuses; a row added without one gets a status from its test cell
// (NOT_RUN_HARDWARE when the test cell says so, else REQUIRED_CPU).
//
// With passed non-nil (a run's results), REQUIRED_CPU rows whose every
// named test passed in that run become PASS, and PASS rows that did not
// pass in it go back to REQUIRED_CPU; NOT_RUN_HARDWARE rows never change.
func AddStatusColumn(src string, root string, passed func(Row) bool) string {
	lines := strings.Split(src, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !strings.HasPrefix(strings.TrimSpace(line), "|") || i+1 >= len(lines) || !isSeparator(splitCells(lines[i+1])) {
			out = append(out, line)
			continue
		}
		head := splitCells(line)
		t := headerOf(head)
		sep := splitCells(lines[i+1])
		if t.statusCol < 0 {
			head = insertCell(head, 1, "status")
			sep = insertCell(sep, 1, "---")
		}
		out = append(out, joinCells(head), "|"+strings.Join(sep, "|")+"|")
		for i += 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
			cells := splitCells(lines[i])
			status := ""
			if t.statusCol >= 0 && len(cells) >= len(head) {
				status = cells[t.statusCol]
			} else {
				test := cells[len(cells)-1]
				status = StatusRequiredCPU
				if strings.Contains(test, StatusNotRunHardware) {
					status = StatusNotRunHardware
				}
				cells = insertCell(cells, 1, status)
			}
			if passed != nil && status != StatusNotRunHardware {
				row := Row{Line: i + 1, Contract: cells[0], Status: status, TestCell: cells[len(cells)-1], HasCol: true}
				row.Refs = parseRefs(row.TestCell, root)
				next := StatusRequiredCPU
				if passed(row) {
					next = StatusPass
				}
				cells[1] = next
			}
			out = append(out, joinCells(cells))
		}
		i--
	}
	return strings.Join(out, "\n")
}

func insertCell(cells []string, at int, v string) []string {
	if at > len(cells) {
		at = len(cells)
	}
	out := append([]string{}, cells[:at]...)
	out = append(out, v)
	return append(out, cells[at:]...)
}

func joinCells(cells []string) string {
	return "| " + strings.Join(cells, " | ") + " |"
}
