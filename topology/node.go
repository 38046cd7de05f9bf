package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// maxNUMANodes is Linux's MAX_NUMNODES at its largest (NODES_SHIFT 10): a
// distance row never has more entries.
const maxNUMANodes = 1 << 10

// parseDistances parses a node*/distance row: one distance per online node,
// in node-id order, separated by spaces.
func parseDistances(s string) ([]int, error) {
	var out []int
	for f := range strings.FieldsSeq(s) {
		if len(out) == maxNUMANodes {
			return nil, fmt.Errorf("distance row of more than %d entries", maxNUMANodes)
		}
		d, err := strconv.Atoi(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("bad distance %q", truncate(f))
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty distance row")
	}
	return out, nil
}
